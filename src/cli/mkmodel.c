/* mkmodel.c — `cobatch mkmodel`: write a random-weight model with a real model's shapes. */
#include "../runtime/synth.h"
#include "args.h"
#include "cli.h"
#include "flags.h"

#include <stdio.h>
#include <string.h>

int cb_cmd_mkmodel(int argc, char **argv) {
    const char *preset = NULL, *type = "q8_0", *out = NULL;
    int64_t seed = 1, threads = 0;
    char presets[256];
    snprintf(presets, sizeof(presets), "model shape: %s", cb_synth_preset_names());
    const cb_flag own[] = {
        {"--preset", "NAME", CB_FLAG_STR, &preset, .help = presets},
        {"--type", "TYPE", CB_FLAG_STR, &type,
         .help = "weights: q8_0, q4_0, q4_1, q4_k_m, q5_k_m or f16 (default q8_0)"},
        {"-o, --out", "FILE", CB_FLAG_STR, &out, .help = "the GGUF file to write"},
        {"--seed", "N", CB_FLAG_I64, &seed, 0, 9e15, .help = "weight seed (default 1)"},
        {"--threads", "N", CB_FLAG_I64, &threads, 1, 1024, .help = "threads that quantize (default: all cores)"},
    };
    cb_cli cli = {.cmd = "cobatch mkmodel",
                  .usage = "usage: cobatch mkmodel --preset NAME [--type TYPE] -o FILE [--seed N] [--threads N]\n",
                  .footer = "Synthetic models have random weights: right for speed and plumbing, not for quality.\n",
                  .groups = {{"mkmodel", own, sizeof(own) / sizeof(own[0])}},
                  .n_groups = 1};
    int pr = cb_flags_parse(&cli, argc, argv, stdout, stderr);
    if (pr != 0) return pr == 1 ? 0 : 2;
    const cb_synth_shape *shape = preset ? cb_synth_preset(preset) : NULL;
    if (!shape) {
        fprintf(stderr, "cobatch mkmodel: --preset is one of %s%s%s\n", cb_synth_preset_names(), preset ? ", not " : "",
                preset ? preset : "");
        return 2;
    }
    int ftype = cb_synth_ftype(type);
    if (ftype < 0) {
        fprintf(stderr, "cobatch mkmodel: --type is q8_0, q4_0, q4_1, q4_k_m, q5_k_m or f16 (got '%s')\n", type);
        return 2;
    }
    if (!out) {
        fprintf(stderr, "cobatch mkmodel: give the output file with -o FILE\n");
        return 2;
    }
    char err[512] = "";
    if (cb_synth_write(shape, ftype, (uint64_t)seed, (int)threads, out, err, sizeof(err)) != 0) {
        fprintf(stderr, "cobatch mkmodel: %s\n", err);
        return 1;
    }
    fprintf(stderr, "cobatch mkmodel: wrote %s (%s, %s, random weights)\n", out, shape->name, type);
    return 0;
}
