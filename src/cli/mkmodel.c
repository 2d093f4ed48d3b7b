/* mkmodel.c — `cobatch mkmodel`: write a random-weight model with a real model's shapes. */
#include "../runtime/synth.h"
#include "args.h"
#include "cli.h"

#include <stdio.h>
#include <string.h>

static void usage(void) {
    printf("usage: cobatch mkmodel --preset NAME [--type TYPE] -o FILE [--seed N] [--threads N]\n"
           "  --preset NAME    model shape: %s\n"
           "  --type TYPE      weights: q8_0, q4_0, q4_1, q4_k_m, q5_k_m or f16 (default q8_0)\n"
           "  -o, --out FILE   the GGUF file to write\n"
           "  --seed N         weight seed (default 1)\n"
           "Synthetic models have random weights: right for speed and plumbing, not for quality.\n",
           cb_synth_preset_names());
}

int cmd_mkmodel(int argc, char **argv) {
    const char *preset = NULL, *type = "q8_0", *out = NULL;
    int64_t seed = 1, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        } else if (!strcmp(a, "--preset") && has) {
            preset = argv[++i];
        } else if (!strcmp(a, "--type") && has) {
            type = argv[++i];
        } else if ((!strcmp(a, "-o") || !strcmp(a, "--out")) && has) {
            out = argv[++i];
        } else if (!strcmp(a, "--seed") && has) {
            if (!cb_parse_int(argv[++i], 0, INT64_MAX, &seed)) {
                fprintf(stderr, "cobatch mkmodel: --seed takes a whole number >= 0 (got '%s')\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--threads") && has) {
            if (!cb_parse_int(argv[++i], 1, 1024, &threads)) {
                fprintf(stderr, "cobatch mkmodel: --threads takes a whole number from 1 to 1024 (got '%s')\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "cobatch mkmodel: unknown or incomplete option '%s' (see cobatch mkmodel --help)\n", a);
            return 2;
        }
    }
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
