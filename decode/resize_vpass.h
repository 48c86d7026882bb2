/*
 * The vertical pass of resize.c's SIMD paths, one body for two vector
 * widths: resize.c includes this file once for SSE2 (16 bytes) and once for
 * AVX2 (32 bytes), each time after defining
 *   VPASS_NAME   the function's name, VPASS_TARGET its attributes;
 *   VEC          the vector type, VEC_BYTES its width;
 *   VOP(op)      the intrinsic op of that width (_mm_op, _mm256_op);
 *   VEC_LOAD, VEC_STORE, VEC_ZERO  the aligned load and store, and zero.
 * It undefines them at the end.
 *
 * Output row o from the horizontal pass's rows (tmp, starting at input row
 * y0), VEC_BYTES bytes at a time, two rows per pmaddwd; nbytes is a multiple
 * of VEC_BYTES (tmp rows and `row` are padded for it). The unpacks and packs
 * work within 128-bit lanes and undo each other, so the bytes come back in
 * order at either width.
 */
VPASS_TARGET static void VPASS_NAME(const axis *a, uint32_t o, const uint8_t *tmp,
                                    size_t tstride, uint32_t y0, uint8_t *row, size_t nbytes)
{
    const VEC zero = VEC_ZERO();
    const VEC half = VOP(set1_epi32)(1 << (a->prec - 1));
    const int prec = a->prec;
    const int16_t *w = a->w + (size_t)o * a->ksize;
    const uint8_t *base = tmp + (size_t)(a->start[o] - (int32_t)y0) * tstride;
    int n = a->count[o];
    for (size_t x = 0; x < nbytes; x += VEC_BYTES) {
        VEC a0 = half, a1 = half, a2 = half, a3 = half;
        const uint8_t *p = base + x;
        int k = 0;
        for (; k + 1 < n; k += 2, p += 2 * tstride) {
            VEC r0 = VEC_LOAD((const VEC *)p);
            VEC r1 = VEC_LOAD((const VEC *)(p + tstride));
            VEC c = VOP(set1_epi32)(pair(w + k));
            VEC lo = VOP(unpacklo_epi8)(r0, r1), hi = VOP(unpackhi_epi8)(r0, r1);
            a0 = VOP(add_epi32)(a0, VOP(madd_epi16)(VOP(unpacklo_epi8)(lo, zero), c));
            a1 = VOP(add_epi32)(a1, VOP(madd_epi16)(VOP(unpackhi_epi8)(lo, zero), c));
            a2 = VOP(add_epi32)(a2, VOP(madd_epi16)(VOP(unpacklo_epi8)(hi, zero), c));
            a3 = VOP(add_epi32)(a3, VOP(madd_epi16)(VOP(unpackhi_epi8)(hi, zero), c));
        }
        if (k < n) {
            VEC r0 = VEC_LOAD((const VEC *)p);
            VEC c = VOP(set1_epi32)((uint16_t)w[k]);
            VEC lo = VOP(unpacklo_epi8)(r0, zero), hi = VOP(unpackhi_epi8)(r0, zero);
            a0 = VOP(add_epi32)(a0, VOP(madd_epi16)(VOP(unpacklo_epi16)(lo, zero), c));
            a1 = VOP(add_epi32)(a1, VOP(madd_epi16)(VOP(unpackhi_epi16)(lo, zero), c));
            a2 = VOP(add_epi32)(a2, VOP(madd_epi16)(VOP(unpacklo_epi16)(hi, zero), c));
            a3 = VOP(add_epi32)(a3, VOP(madd_epi16)(VOP(unpackhi_epi16)(hi, zero), c));
        }
        a0 = VOP(srai_epi32)(a0, prec);
        a1 = VOP(srai_epi32)(a1, prec);
        a2 = VOP(srai_epi32)(a2, prec);
        a3 = VOP(srai_epi32)(a3, prec);
        VEC v = VOP(packus_epi16)(VOP(packs_epi32)(a0, a1), VOP(packs_epi32)(a2, a3));
        VEC_STORE((VEC *)(row + x), v);
    }
}

#undef VPASS_NAME
#undef VPASS_TARGET
#undef VEC
#undef VEC_BYTES
#undef VOP
#undef VEC_LOAD
#undef VEC_STORE
#undef VEC_ZERO
