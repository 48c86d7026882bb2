/*
 * feeder-pack --max-side: a JPEG whose longer side exceeds the limit is
 * re-encoded once, at pack time, at the limit (FFCV's max_resolution), so
 * every epoch decodes fewer pixels from fewer bytes. Tool code: used by the
 * packer only.
 */
#ifndef FEEDER_TOOLS_SHRINK_H
#define FEEDER_TOOLS_SHRINK_H

#include <stddef.h>
#include <stdint.h>

typedef struct fpk_shrinker fpk_shrinker;

/* A decoder, an encoder and their buffers, reused for every file. NULL when
 * out of memory. */
fpk_shrinker *fpk_shrinker_create(uint32_t max_side, int quality);
void fpk_shrinker_destroy(fpk_shrinker *s);

/* The size a w x h image gets: the longer side max_side, the shorter one
 * scaled alike and rounded (at least 1); unchanged when it fits. */
void fpk_shrink_size(uint32_t max_side, uint32_t w, uint32_t h, uint32_t *nw, uint32_t *nh);

/* Shrink the JPEG `jpeg` (len bytes, w x h, TurboJPEG subsampling `ss` and
 * colourspace `cs` from tjDecompressHeader3) when its longer side exceeds
 * max_side. Returns 0 when it fits (keep its bytes), 1 with *out / *out_len
 * the re-encoded file (owned by `s`, valid until its next call), or -1 with
 * the reason in err. How: decoded and resized exactly as the loader's TURBO
 * decoder does with the RESIZE pipeline (CMYK and YCCK converted as Pillow
 * does, the antialiased triangle filter), then tjCompress2 at `quality` with
 * the accurate DCT, keeping the subsampling (gray stays gray; 4-component
 * and unusual samplings become 4:4:4). Markers (Exif, ICC) are not kept:
 * the loader reads neither. Deterministic: the same file gives the same
 * bytes. */
int fpk_shrink(fpk_shrinker *s, const uint8_t *jpeg, size_t len, int w, int h, int ss, int cs,
               const uint8_t **out, size_t *out_len, char *err, size_t errlen);

#endif
