/* cli.h — the subcommands of the cobatch binary. Each returns the process exit code:
 * 0 success, 1 runtime failure, 2 bad usage. */
#ifndef CB_CLI_H
#define CB_CLI_H

#include <cobatch.h>

int cb_cmd_run(int argc, char **argv);
int cb_cmd_mkmodel(int argc, char **argv);
int cb_cmd_bench(int argc, char **argv);
int cb_cmd_serve(int argc, char **argv);
int cb_cmd_loadgen(int argc, char **argv);
int cb_cmd_batch(int argc, char **argv);

/* The start-up line naming where the weights live and why ("cobatch serve: weights in
 * CPU_REPACK,CPU_Mapped (--repack auto): ...; AMX off: known ggml fault ..."), on stderr. */
void cb_say_weights(const char *cmd, const cobatch_engine *e);

#endif
