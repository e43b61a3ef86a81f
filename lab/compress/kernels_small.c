/* Included by kernels.c (its static helpers and types are in scope): the small-tensor
 * kernels. */

/* The small-tensor kernels (issue 31 item 4): each does in one C call what a codec's compress
 * or decompress did in several torch ops and C calls, so that a call on ~1000 values costs a
 * few microseconds (Python, ctypes and the payload's allocations), not tens.
 *
 * Each gives the bits of the codec's general route: the same per-value arithmetic (the same
 * static helpers above: bucket_levels, sign_bits, bucket_side_sums, bucket_expand_bits),
 * packing in the layout of lab.compress.packing, and, where a route draws from torch's CPU
 * generator or ranks with torch.topk, the exact algorithm torch runs (checked against torch
 * itself at first use by lab.compress.native_small, which keeps torch's route on a mismatch).
 */

/* ---- decoders ----------------------------------------------------------------------------- */

/* out = bit ? v1 : v0 for n values: lab_expand_bits with one bucket whose two values come as
 * float arguments, so that Python builds no array for them. */
void lab_expand_pair(const uint8_t *bits, int64_t n, float v0, float v1, float *out) {
    bucket_expand_bits(bits, n, v0, v1, out, 0);
}

/* out (n floats) zeroed, then out[idx[i]] = v[i] for i < k, idx int32 (wide == 0) or int64;
 * every index checked against [0, n) before its write. Returns 0, or i + 1 for the first index
 * out of range (the caller raises). The sparse codecs' decode without a torch.zeros. */
int64_t lab_scatter_into(const float *restrict v, const void *idx, int32_t wide, int64_t k,
                         int64_t n, float *restrict out) {
    memset(out, 0, (size_t)n * sizeof(float));
    if (!wide)
        return lab_scatter(v, (const int32_t *)idx, k, n, out);
    for (int64_t i = 0; i < k; i++) {
        uint64_t j = (uint64_t)((const int64_t *)idx)[i];
        if (j >= (uint64_t)n)  /* a negative index wraps past n */
            return i + 1;
        out[j] = v[i];
    }
    return 0;
}

/* The threshold codec's decode: out zeroed, then out[idx[i]] = bit i ? tau : -tau. The +-tau
 * of 1024 entries at a time are expanded first (bucket_expand_bits, vectorized), then
 * scattered with their index checks, as lab_scatter does. */
int64_t lab_scatter_signs(const int32_t *restrict idx, const uint8_t *restrict bits, int64_t k,
                          int64_t n, float tau, float *restrict out) {
    float vals[1024];
    memset(out, 0, (size_t)n * sizeof(float));
    for (int64_t c0 = 0; c0 < k; c0 += 1024) {
        int64_t len = k - c0 < 1024 ? k - c0 : 1024;
        bucket_expand_bits(bits + c0 / 8, len, -tau, tau, vals, 0);
        for (int64_t i = 0; i < len; i++) {
            uint32_t j = (uint32_t)idx[c0 + i];
            if ((int64_t)j >= n)
                return c0 + i + 1;
            out[j] = vals[i];
        }
    }
    return 0;
}

/* TernGrad's decode: the 2-bit codes of packed expanded with the table {0 v, v, -1 v, 0 v}
 * (lab_expand_codes2; the products the codec's table holds), for v its scale. */
void lab_expand_ternary(const uint8_t *packed, int64_t n, float v, float *out) {
    const float table[4] = {0.0f * v, v, -1.0f * v, 0.0f * v};
    lab_expand_codes2(packed, n, table, out);
}

/* QSGD's decode after the payload's header check, which it makes itself: 1 (nothing written)
 * if a norm is not finite or below 0 (the caller's full check names it), else lab_dequantize
 * and 0. */
int32_t lab_dequantize_checked(const uint8_t *codes, int32_t bits, const uint8_t *signs,
                               int64_t n, int64_t bucket, const float *norms, float s,
                               float *out) {
    for (int64_t k = 0; k < (n + bucket - 1) / bucket; k++)
        if (!(norms[k] >= 0 && norms[k] <= 3.40282347e38f))
            return 1;
    lab_dequantize(codes, bits, signs, n, bucket, norms, s, out);
    return 0;
}

/* ---- packing (lab.compress.packing's layout: little-endian bit order) ---------------------- */

/* len codes < 2^bits for bits = 1, 2 or 4, 8 / bits to a byte, code i at bits (i bits) mod 8
 * of byte i bits / 8 (pack_bits, pack_uint); the last byte's unused bits are 0. Inlined with a
 * constant `bits`, so that the loop over bytes vectorizes. */
static inline void pack_whole(const uint8_t *restrict c, int64_t len, int bits,
                              uint8_t *restrict out) {
    const int per = 8 / bits;
    int64_t g = 0;
    for (; g < len / per; g++) {
        uint8_t b = 0;
        for (int j = 0; j < per; j++)
            b |= (uint8_t)(c[per * g + j] << (j * bits));
        out[g] = b;
    }
    if (len % per) {
        uint8_t b = 0;
        for (int64_t i = per * g; i < len; i++)
            b |= (uint8_t)(c[i] << ((i - per * g) * bits));
        out[g] = b;
    }
}

/* len codes < 2^bits (bits <= 8) as one bit stream, code i at stream bits [i bits, (i+1) bits),
 * least significant first (pack_uint); the last byte's unused bits are 0. */
static void pack_codes(const uint8_t *restrict c, int64_t len, int bits, uint8_t *restrict out) {
    switch (bits) {
        case 1: pack_whole(c, len, 1, out); return;
        case 2: pack_whole(c, len, 2, out); return;
        case 4: pack_whole(c, len, 4, out); return;
        case 8: memcpy(out, c, (size_t)len); return;
    }
    uint32_t acc = 0;  /* 3, 5, 6, 7 bits: a stream through a small accumulator */
    int held = 0;
    for (int64_t i = 0; i < len; i++) {
        acc |= (uint32_t)c[i] << held;
        held += bits;
        if (held >= 8) {
            *out++ = (uint8_t)acc;
            acc >>= 8;
            held -= 8;
        }
    }
    if (held)
        *out = (uint8_t)acc;
}

/* ---- quantizers ---------------------------------------------------------------------------- */

#define CHUNK 4096  /* values per step of the fused quantizers: a multiple of 64, so that every
                     * chunk's flags and codes start on a byte */

/* QSGD's encode after its norms: the levels of lab_stochastic_levels (bucket_levels, the same
 * hash counter: the value's index), the flags x < 0 packed 8 a byte, the levels packed at
 * `bits` bits, in chunks; an all-zero bucket (norm 0) scales by 1, as the codec does. */
void lab_qsgd_encode(const float *x, int64_t n, int64_t bucket, const float *norms, float s,
                     int32_t bits, const int64_t *key, uint8_t *signs, uint8_t *levels) {
    uint8_t lv[CHUNK], neg[CHUNK];
    uint32_t k0 = (uint32_t)key[0], k1 = (uint32_t)key[1];
    for (int64_t c0 = 0; c0 < n; c0 += CHUNK) {
        int64_t c1 = n - c0 < CHUNK ? n : c0 + CHUNK;
        for (int64_t i0 = c0; i0 < c1;) {  /* the pieces of buckets inside this chunk */
            int64_t b = i0 / bucket, end = (b + 1) * bucket < c1 ? (b + 1) * bucket : c1;
            float norm = norms[b] > 0 ? norms[b] : 1.0f;
            bucket_levels(x + i0, end - i0, norm, s, (uint32_t)i0, k0, k1, 0, lv + (i0 - c0),
                          neg + (i0 - c0));
            i0 = end;
        }
        pack_whole(neg, c1 - c0, 1, signs + c0 / 8);
        pack_codes(lv, c1 - c0, bits, levels + c0 * bits / 8);
    }
}

/* TernGrad's scaler inputs: returns max |x| (NaN if any x is NaN, Inf if one is infinite) and,
 * where not NULL, copies x to `copy` and writes sq[i] = x[i] * x[i] (what x.square() gives),
 * whose torch sums give the codec's sigma. */
float lab_absmax_squares(const float *restrict x, int64_t n, float *restrict copy,
                         float *restrict sq) {
    uint32_t top = 0;  /* |x|'s bits: for floats >= 0 their order, NaN above Inf; an integer
                        * max vectorizes where a float one (NaN rules) does not */
    for (int64_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, x + i, 4);
        b &= 0x7fffffffu;
        top = b > top ? b : top;
    }
    if (copy)
        memcpy(copy, x, (size_t)n * sizeof(float));
    for (int64_t i = 0; sq && i < n; i++)
        sq[i] = x[i] * x[i];
    float f;
    memcpy(&f, &top, 4);
    return top > 0x7f800000u ? NAN : f;
}

/* TernGrad's codes: bucket_levels with one bucket of norm s and one level (code level << (x <
 * 0): 0, 1 for +1, 2 for -1), packed four a byte (pack_uint(codes, 2)), in chunks. */
void lab_ternary_codes(const float *x, int64_t n, float s, const int64_t *key, uint8_t *packed) {
    uint8_t codes[CHUNK];
    uint32_t k0 = (uint32_t)key[0], k1 = (uint32_t)key[1];
    volatile float one = 1.0f;  /* read, not folded: with a constant 1 GCC leaves the loop */
    float levels = one;         /* scalar, as lab_stochastic_levels (s = 1 there) is not */
    for (int64_t c0 = 0; c0 < n; c0 += CHUNK) {
        int64_t len = n - c0 < CHUNK ? n - c0 : CHUNK;
        bucket_levels(x + c0, len, s, levels, (uint32_t)c0, k0, k1, 1, codes, 0);
        pack_codes(codes, len, 2, packed + c0 / 4);
    }
}

/* ---- sign codecs --------------------------------------------------------------------------- */

/* EF-SGD's step with the scaled sign: p = e + g (g copied where e is NULL; p may be e itself:
 * in place, and then nothing is written if some e + g is NaN or infinite), the sign bits of p
 * and sum |p| (sign_bits), mean = sum / n; where mean and its float32 rounding are finite,
 * p -= +-scale (the residual: p minus the decoded payload), and the scale (mean rounded to
 * float32) is written to scale_out. Returns mean (NaN where nothing was written); where it or
 * the scale is not finite the caller takes the general route, which raises. */
double lab_ef_scaled_sign(const float *restrict g, const float *e, int64_t n, float *p,
                          uint8_t *restrict bits, float *restrict scale_out) {
    if (e) {
        int32_t bad = 0;
        for (int64_t i = 0; i < n; i++) {
            float s = e[i] + g[i];
            bad |= !(fabsf(s) <= 3.40282347e38f);  /* NaN or Inf */
        }
        if (bad)
            return NAN;
        for (int64_t i = 0; i < n; i++)
            p[i] = e[i] + g[i];
    } else {
        memcpy(p, g, (size_t)n * sizeof(float));
    }
    double mean = sign_bits(p, n, bits, 1) / (double)n;
    float scale = (float)mean;
    *scale_out = scale;
    if (isfinite(mean) && isfinite(scale))
        bucket_expand_bits(bits, n, -scale, scale, p, 1);
    return mean;
}

/* 1-bit SGD's encode with one bucket: the flags x >= 0 packed (sign_bits), the two side sums
 * and the count (bucket_side_sums), and the two means rounded to float32 (mean of the values
 * >= 0, mean of the others, each count at least 1). Returns 1 (nothing written to means) where
 * a sum is not finite: the caller takes the general route, which raises. */
int32_t lab_onebit_encode(const float *x, int64_t n, uint8_t *bits, float *means) {
    double pos, neg;
    int64_t count;
    sign_bits(x, n, bits, 0);
    bucket_side_sums(x, n, &pos, &neg, &count);
    if (!isfinite(pos) || !isfinite(neg))
        return 1;
    means[0] = (float)(pos / (double)(count > 1 ? count : 1));
    means[1] = (float)(neg / (double)(n - count > 1 ? n - count : 1));
    return 0;
}

/* QSGD's buckets before torch's norms: out = x then zeros up to `total` values (the last bucket
 * padded as torch.cat pads it; out NULL: nothing copied). Returns 1 if every x is
 * finite and |x| < 2^50, so that no bucket's sum of squares (< 65536 * 2^100) can overflow
 * and every norm is finite; else 0, and the caller takes the general route. */
int32_t lab_qsgd_prepare(const float *restrict x, int64_t n, float *restrict out,
                         int64_t total) {
    uint32_t top = 0;  /* |x|'s bits, as in lab_absmax_squares */
    for (int64_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, x + i, 4);
        b &= 0x7fffffffu;
        top = b > top ? b : top;
    }
    if (out) {
        memcpy(out, x, (size_t)n * sizeof(float));
        memset(out + n, 0, (size_t)(total - n) * sizeof(float));
    }
    return top < ((127u + 50u) << 23);  /* the bits of 2^50 */
}

/* ---- sparsifiers --------------------------------------------------------------------------- */

/* The threshold codec: the number of |x| > tau, or -1 if some x is NaN or infinite. */
int64_t lab_threshold_count(const float *restrict x, int64_t n, float tau) {
    int64_t count = 0;
    int32_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        count += a > tau;
        bad |= !(a <= 3.40282347e38f);  /* NaN or Inf */
    }
    return bad ? -1 : count;
}

/* ... and its payload: the ascending indices of |x| > tau (int32) and their flags x > 0 packed
 * 8 a byte (lab_threshold_count's count of each). */
void lab_threshold_fill(const float *restrict x, int64_t n, float tau, int32_t *restrict idx,
                        uint8_t *restrict signs) {
    int64_t c = 0;
    uint8_t byte = 0;
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > tau) {
            idx[c] = (int32_t)i;
            byte |= (uint8_t)((x[i] > 0) << (c % 8));
            if (++c % 8 == 0) {
                signs[c / 8 - 1] = byte;
                byte = 0;
            }
        }
    }
    if (c % 8)
        signs[c / 8] = byte;
}

/* DGC's accumulation in place: u = m u + g then v = v + u (momentum correction), else v = v + g;
 * each product and sum rounded to float32 on its own, as torch's separate ops do (the file is
 * compiled with -ffp-contract=off: no fused multiply-add). Returns 1, writing nothing, if some
 * g is NaN or infinite. */
static int32_t dgc_accumulate(const float *restrict g, float *restrict u, float *restrict v,
                              int64_t n, float m, int32_t correction) {
    int32_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad |= !(fabsf(g[i]) <= 3.40282347e38f);
    if (bad)
        return 1;
    if (correction) {
        for (int64_t i = 0; i < n; i++) {
            float t = m * u[i];
            u[i] = t + g[i];
            v[i] = v[i] + u[i];
        }
    } else {
        for (int64_t i = 0; i < n; i++)
            v[i] = v[i] + g[i];
    }
    return 0;
}

