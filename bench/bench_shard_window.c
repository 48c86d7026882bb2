/*
 * bench_shard_window: how random feeder_sampler_shards' order is for each
 * window size W (docs/ARCHITECTURE.md, "Shard-aware order"). The worst case
 * for a windowed shuffle: S shards of R records, shard k holding only class
 * k % C (shards written in class order). For each W, over E epochs:
 *   shards/batch   distinct shards among a batch's B samples;
 *   same label     how often two consecutive samples share a label (a full
 *                  shuffle gives about 1/C);
 *   classes/batch  distinct labels among a batch's B samples;
 *   displacement   mean |t - p| / L of each sample's output position t from
 *                  its place p in the rank's shard-order concatenation (a full
 *                  shuffle gives about 1/3).
 *   bench_shard_window [S R C B E]   (defaults 64 1000 10 256 4)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feeder.h"

static void measure(const uint64_t *counts, uint32_t S, uint64_t R, uint32_t C, uint32_t B,
                    uint32_t E, uint32_t W)
{
    feeder_sampler *s;
    if (feeder_sampler_shards(counts, S, 0, 1, W, 1234, 1, &s) != 0) {
        fprintf(stderr, "bench_shard_window: feeder_sampler_shards failed\n");
        exit(1);
    }
    uint64_t L = feeder_sampler_len(s, 0);
    uint64_t *o = malloc(L * sizeof(*o)), *place = malloc(L * sizeof(*place));
    uint8_t *seen_s = malloc(S), *seen_c = malloc(C);
    double shards = 0, same = 0, classes = 0, disp = 0;
    uint64_t nb = 0;
    for (uint32_t e = 0; e < E; e++) {
        feeder_sampler_fill(s, e, o, L);
        /* The rank's concatenation order: the order shards first appear in. */
        uint64_t next = 0;
        memset(seen_s, 0, S);
        for (uint64_t t = 0; t < L; t++) {
            uint32_t k = (uint32_t)(o[t] / R);
            if (!seen_s[k]) {
                seen_s[k] = 1;
                for (uint64_t r = 0; r < R; r++)
                    place[k * R + r] = next++;
            }
        }
        for (uint64_t t = 0; t < L; t++) {
            disp += (double)(t > place[o[t]] ? t - place[o[t]] : place[o[t]] - t) / (double)L;
            if (t + 1 < L)
                same += (o[t] / R) % C == (o[t + 1] / R) % C;
        }
        for (uint64_t b = 0; b + B <= L; b += B, nb++) {
            memset(seen_s, 0, S);
            memset(seen_c, 0, C);
            for (uint64_t t = b; t < b + B; t++) {
                uint32_t k = (uint32_t)(o[t] / R);
                shards += !seen_s[k];
                classes += !seen_c[k % C];
                seen_s[k] = 1;
                seen_c[k % C] = 1;
            }
        }
    }
    printf("| %s%u | %.1f | %.3f | %.2f | %.3f |\n", W ? "" : "all ", W ? W : S,
           shards / (double)nb, same / (double)(E * (L - 1)), classes / (double)nb,
           disp / (double)(E * L));
    free(o);
    free(place);
    free(seen_s);
    free(seen_c);
    feeder_sampler_destroy(s);
}

int main(int argc, char **argv)
{
    uint32_t S = argc > 1 ? (uint32_t)atoi(argv[1]) : 64;
    uint64_t R = argc > 2 ? (uint64_t)atoll(argv[2]) : 1000;
    uint32_t C = argc > 3 ? (uint32_t)atoi(argv[3]) : 10;
    uint32_t B = argc > 4 ? (uint32_t)atoi(argv[4]) : 256;
    uint32_t E = argc > 5 ? (uint32_t)atoi(argv[5]) : 4;
    if (!S || !R || !C || !B || !E) {
        fprintf(stderr, "usage: bench_shard_window [SHARDS RECORDS CLASSES BATCH EPOCHS]\n");
        return 2;
    }
    uint64_t *counts = malloc(S * sizeof(*counts));
    for (uint32_t k = 0; k < S; k++)
        counts[k] = R;
    printf("%u shards x %llu records, shard k all class k %% %u, batch %u, %u epochs\n\n", S,
           (unsigned long long)R, C, B, E);
    printf("| window W | shards/batch | same label | classes/batch | displacement |\n");
    printf("| ---: | ---: | ---: | ---: | ---: |\n");
    const uint32_t ws[] = {1, 2, 4, 8, 16, 32, 0};
    for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++)
        measure(counts, S, R, C, B, E, ws[i]);
    free(counts);
    return 0;
}
