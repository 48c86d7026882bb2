/*
 * The hue op's vector arithmetic (augment/color.c), written once for two
 * lane counts: color.c includes this file twice, with VF / VI a GCC vector
 * type of LANES float / int32 lanes and FN(name) the functions' names for
 * that width (4 lanes: the baseline build's SSE registers; 8: the AVX2
 * path's). No include guard, on purpose.
 */
INLINE VF FN(splat)(float x)
{
    VF v = {0}; /* + x: every lane x (the constants here are not -0) */
    return v + x;
}
/* m ? a : b, lane by lane, m all ones or zeros */
INLINE VF FN(sel)(VI m, VF a, VF b) { return (VF)(((VI)a & m) | ((VI)b & ~m)); }
INLINE VF FN(vmax)(VF a, VF b) { return FN(sel)(a > b, a, b); }
INLINE VF FN(vmin)(VF a, VF b) { return FN(sel)(a < b, a, b); }
INLINE VF FN(clamp01)(VF v) { return FN(vmin)(FN(vmax)(v, FN(splat)(0.0f)), FN(splat)(1.0f)); }
/* floorf of |x| < 2^23 (exact: the truncation and its float are exact). */
INLINE VF FN(floor_small)(VF x)
{
    VF t = __builtin_convertvector(__builtin_convertvector(x, VI), VF);
    return FN(sel)(t > x, t - FN(splat)(1.0f), t);
}

/* rgb_to_hsv's h and s of LANES pixels (v is maxc), shifted by `shift`. */
INLINE VF FN(hue_of)(VF r, VF g, VF b, VF maxc, VF *s, float shift)
{
    VF minc = FN(vmin)(r, FN(vmin)(g, b));
    /* torchvision divides by 1 where maxc == minc (gray): there every
     * numerator below is +0, as it is over any positive divisor, and
     * elsewhere maxc and cr are near 1/255 or more, far above 1e-6 */
    VF cr = maxc - minc;
    *s = cr / FN(vmax)(maxc, FN(splat)(1e-6f));
    VF crd = FN(vmax)(cr, FN(splat)(1e-6f));
    VF rc = (maxc - r) / crd, gc = (maxc - g) / crd, bc = (maxc - b) / crd;
    VF hr = bc - gc, hg = FN(splat)(2.0f) + rc - bc, hb = FN(splat)(4.0f) + gc - rc;
    VF h = FN(sel)(maxc == g, hg, hb);
    h = FN(sel)(maxc == r, hr, h);
    h = h / FN(splat)(6.0f) + FN(splat)(1.0f);
    h = FN(sel)(h >= FN(splat)(1.0f), h - FN(splat)(1.0f), h);
    h = h + FN(splat)(shift);
    return h - FN(floor_small)(h); /* torch's %: the sign of the divisor */
}

/* hsv_to_rgb of LANES pixels, scaled to 255 in o[0..2]. */
INLINE void FN(rgb_of)(VF h, VF s, VF v, VF o[3])
{
    VF i = FN(floor_small)(h * FN(splat)(6.0f)), f = h * FN(splat)(6.0f) - i;
    i = FN(sel)(i >= FN(splat)(6.0f), i - FN(splat)(6.0f), i); /* h * 6 is in [0, 6] */
    VF p = FN(clamp01)(v * (FN(splat)(1.0f) - s)), qq = FN(clamp01)(v * (FN(splat)(1.0f) - s * f));
    VF t = FN(clamp01)(v * (FN(splat)(1.0f) - s * (FN(splat)(1.0f) - f)));
    /* sectors 0..5: (v,t,p) (q,v,p) (p,v,t) (p,q,v) (t,p,v) (v,p,q) */
    VF ro = FN(sel)(i == FN(splat)(4.0f), t, p), go = FN(sel)(i == FN(splat)(3.0f), qq, p);
    VF bo = FN(sel)(i == FN(splat)(5.0f), qq, p);
    ro = FN(sel)(i == FN(splat)(1.0f), qq, ro);
    go = FN(sel)(i == FN(splat)(0.0f), t, go);
    bo = FN(sel)(i == FN(splat)(2.0f), t, bo);
    ro = FN(sel)((i == FN(splat)(0.0f)) | (i == FN(splat)(5.0f)), v, ro);
    go = FN(sel)((i == FN(splat)(1.0f)) | (i == FN(splat)(2.0f)), v, go);
    bo = FN(sel)((i == FN(splat)(3.0f)) | (i == FN(splat)(4.0f)), v, bo);
    o[0] = ro * FN(splat)(255.0f);
    o[1] = go * FN(splat)(255.0f);
    o[2] = bo * FN(splat)(255.0f);
}


/* Pixels [0, n) of x[0..2] (r, g, b / 255, zero past n up to a whole
 * vector) through the hue shift, to the bytes' float values in place. */
INLINE void FN(hue_lanes)(float x[3][CHUNK8], size_t n, float shift)
{
    for (size_t k = 0; k < n; k += LANES) {
        VF r, g, b, s, o[3];
        memcpy(&r, &x[0][k], sizeof(r));
        memcpy(&g, &x[1][k], sizeof(g));
        memcpy(&b, &x[2][k], sizeof(b));
        VF maxc = FN(vmax)(r, FN(vmax)(g, b));
        VF h = FN(hue_of)(r, g, b, maxc, &s, shift);
        FN(rgb_of)(h, s, maxc, o);
        for (int c = 0; c < 3; c++)
            memcpy(&x[c][k], &o[c], sizeof(o[c]));
    }
}
