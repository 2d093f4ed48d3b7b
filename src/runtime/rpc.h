/* rpc.h — llama.cpp's RPC backend, from cobatch's side: the devices a model's layers go to. ggml's
 * RPC client aborts the process on a server it cannot reach, so each server is probed first and a
 * refusal names it. Runtime only. */
#ifndef CB_RPC_H
#define CB_RPC_H

#include <stddef.h>

struct ggml_backend_device; /* ggml_backend_dev_t */

#define CB_RPC_MAX_DEVICES 64

/* The devices the model's layers go to (llama_model_params.devices): every device of each RPC server
 * in list ("HOST:PORT,..."), in its order (llama.cpp splits the layers by their free memory), then
 * this host's GPUs; NULL-terminated in devs (max entries). Returns the count, or -1 with err set (a
 * server unreachable, or a build without COBATCH_RPC). */
int cb_rpc_devices(const char *list, struct ggml_backend_device **devs, int max, char *err, size_t errlen);

#endif
