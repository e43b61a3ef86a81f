/* Native CPU kernels for the elementwise cores of the casts and the sign, 1-bit, QSGD and
 * TernGrad codecs (issue 8).
 *
 * Each function is one pass over the values where the torch/numpy reference in the Python
 * codec makes three to eight (abs, divide, scale, cast, add random bytes, compare, shift, or,
 * pack). Plain C with restrict pointers and GCC/Clang vector extensions (an AVX intrinsic
 * where x86 has a better instruction), so that `cc -O3 -march=native` turns every loop into
 * SIMD on x86 and ARM alike. lab.compress.native compiles this file once per machine and
 * falls back to the reference where it cannot; the tests compare the two.
 *
 * The second half (from "The small-tensor kernels") fuses whole encodes and decodes for the
 * codecs' small-tensor paths (issue 31 item 4): kernels_small.c, and kernels_select.c for
 * Top-k's and Random-k's selections, included at the end of this file.
 */
#include <math.h>  /* isfinite, NAN */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __AVX__
#include <immintrin.h>
#endif

typedef uint32_t u32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef float f32x8 __attribute__((vector_size(32)));
typedef uint8_t u8x8 __attribute__((vector_size(8)));
typedef double f64x4 __attribute__((vector_size(32)));
typedef int64_t i64x4 __attribute__((vector_size(32)));
typedef float f32x4 __attribute__((vector_size(16)));

/* A counter-based random number: 32 bits from (index, key), two rounds of Wellons' lowbias32
 * integer hash. Any index can be drawn independently, so the loop below vectorizes. */
static inline uint32_t mix32(uint32_t x) {
    x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
    return x;
}

/* One bucket: r = min(|x| / norm * s, s); level floor(r) + 1 with probability r - floor(r)
 * (to within 2^-31), else floor(r). signed_codes: write level << (x < 0) instead of the
 * level, and no sign flags (TernGrad's codes {0, +1 -> 1, -1 -> 2}). */
static inline void bucket_levels(const float *restrict x, int64_t len, float norm, float s,
                                 uint32_t first, uint32_t k0, uint32_t k1, int signed_codes,
                                 uint8_t *restrict levels, uint8_t *restrict negative) {
    for (int64_t i = 0; i < len; i++) {
        float a = fabsf(x[i]);  /* not x < 0 ? -x : x, a branch the compiler keeps */
        float r = a / norm * s;
        r = r < s ? r : s;
        int32_t low = (int32_t)r;  /* r >= 0: truncation is floor */
        int32_t threshold = (int32_t)((r - (float)low) * 2147483648.0f);
        int32_t u = (int32_t)(mix32(mix32(first + (uint32_t)i + k0) ^ k1) >> 1);
        int32_t level = low + (u < threshold);
        int32_t neg = x[i] < 0;
        if (signed_codes) {
            levels[i] = (uint8_t)(level * (1 + neg));  /* level << neg: a shift by a
                                                          * variable does not vectorize */
        } else {
            levels[i] = (uint8_t)level;
            negative[i] = (uint8_t)neg;
        }
    }
}

/* Stochastic levels of n values in buckets of `bucket` (the last may be short), each bucket
 * with its own norm (> 0) and s <= 255 levels. negative == NULL: TernGrad's signed codes. */
void lab_stochastic_levels(const float *x, int64_t n, int64_t bucket, const float *norms,
                           float s, uint32_t k0, uint32_t k1, uint8_t *levels,
                           uint8_t *negative) {
    for (int64_t b0 = 0, k = 0; b0 < n; b0 += bucket, k++) {
        int64_t len = n - b0 < bucket ? n - b0 : bucket;
        if (negative)
            bucket_levels(x + b0, len, norms[k], s, (uint32_t)b0, k0, k1, 0, levels + b0,
                          negative + b0);
        else
            bucket_levels(x + b0, len, norms[k], s, (uint32_t)b0, k0, k1, 1, levels + b0, 0);
    }
}

/* One bucket of QSGD's decoder: out = level * norm / s, the sign bit set where the sign flag
 * is 1; 8 values per step from B bytes of packed B-bit levels and one byte of flags. */
#define DEFINE_DEQUANTIZE(B)                                                                  \
static void dequantize##B(const uint8_t *restrict codes, const uint8_t *restrict signs,      \
                          int64_t len, float norm, float s, float *restrict out) {          \
    const u32x8 shift = {0, B, 2 * B, 3 * B, 4 * B, 5 * B, 6 * B, 7 * B};                  \
    const u32x8 flag = {1, 2, 4, 8, 16, 32, 64, 128};                                        \
    int64_t g = 0;                                                                            \
    for (; g < len / 8; g++) {                                                                \
        u32x8 level;                                                                          \
        if (B == 8) {                                                                         \
            u8x8 bytes;                                                                       \
            memcpy(&bytes, codes + 8 * g, 8);                                                 \
            level = __builtin_convertvector(bytes, u32x8);                                    \
        } else {                                                                              \
            uint64_t word = 0;                                                                \
            memcpy(&word, codes + B * g, B);                                                  \
            level = (((u32x8){0} + (uint32_t)word) >> shift) & ((1u << B) - 1);               \
        }                                                                                     \
        f32x8 value = __builtin_convertvector((i32x8)level, f32x8) * norm / s;              \
        u32x8 bits;                                                                           \
        memcpy(&bits, &value, 32);                                                            \
        bits |= (u32x8)((((u32x8){0} + signs[g]) & flag) != 0) & 0x80000000u;                \
        memcpy(out + 8 * g, &bits, 32);                                                       \
    }                                                                                         \
    for (int64_t i = 8 * g; i < len; i++) { /* the tail of the last bucket */                \
        uint32_t level = (codes[i * B / 8] >> (i * B % 8)) & ((1u << B) - 1);                 \
        union { float f; uint32_t u; } value = {.f = (float)level * norm / s};                \
        value.u |= (uint32_t)((signs[i / 8] >> (i % 8)) & 1) << 31;                           \
        out[i] = value.f;                                                                     \
    }                                                                                         \
}
DEFINE_DEQUANTIZE(1)
DEFINE_DEQUANTIZE(2)
DEFINE_DEQUANTIZE(4)
DEFINE_DEQUANTIZE(8)

/* QSGD's decoder for n values in buckets of `bucket` values (a multiple of 8 unless there is
 * one bucket), levels packed at bits = 1, 2, 4 or 8 per value, sign flags packed 8 a byte. */
void lab_dequantize(const uint8_t *codes, int32_t bits, const uint8_t *signs, int64_t n,
                    int64_t bucket, const float *norms, float s, float *out) {
    for (int64_t b0 = 0, k = 0; b0 < n; b0 += bucket, k++) {
        int64_t len = n - b0 < bucket ? n - b0 : bucket;
        const uint8_t *c = codes + b0 * bits / 8, *f = signs + b0 / 8;
        switch (bits) {
            case 1: dequantize1(c, f, len, norms[k], s, out + b0); break;
            case 2: dequantize2(c, f, len, norms[k], s, out + b0); break;
            case 4: dequantize4(c, f, len, norms[k], s, out + b0); break;
            default: dequantize8(c, f, len, norms[k], s, out + b0); break;
        }
    }
}

/* out = v1 where the bit is 1, else v0 (or, with subtract, out -= that), for n values in
 * buckets of `bucket` (a multiple of 8 unless there is one bucket), bits packed 8 a byte,
 * (v0, v1) per bucket in `values`: the decoders of sign codes and 1-bit SGD. */
static inline void bucket_expand_bits(const uint8_t *restrict bits, int64_t len, float v0,
                                      float v1, float *restrict out, int subtract) {
    const u32x8 flag = {1, 2, 4, 8, 16, 32, 64, 128};
    u32x8 w0, w1;
    memcpy(&w0, &(f32x8){v0, v0, v0, v0, v0, v0, v0, v0}, 32);
    memcpy(&w1, &(f32x8){v1, v1, v1, v1, v1, v1, v1, v1}, 32);
    int64_t g = 0;
    for (; g < len / 8; g++) {
        u32x8 set = (u32x8)((((u32x8){0} + bits[g]) & flag) != 0);  /* all ones where 1 */
        u32x8 chosen = (set & w1) | (~set & w0);
        f32x8 value;
        memcpy(&value, &chosen, 32);
        if (subtract) {
            f32x8 o;
            memcpy(&o, out + 8 * g, 32);
            o -= value;
            memcpy(out + 8 * g, &o, 32);
        } else {
            memcpy(out + 8 * g, &value, 32);
        }
    }
    for (int64_t i = 8 * g; i < len; i++) {
        float value = (bits[i / 8] >> (i % 8)) & 1 ? v1 : v0;
        out[i] = subtract ? out[i] - value : value;
    }
}

void lab_expand_bits(const uint8_t *bits, int64_t n, int64_t bucket, const float *values,
                     float *out, int32_t subtract) {
    for (int64_t b0 = 0, k = 0; b0 < n; b0 += bucket, k++) {
        int64_t len = n - b0 < bucket ? n - b0 : bucket;
        if (subtract)
            bucket_expand_bits(bits + b0 / 8, len, values[2 * k], values[2 * k + 1], out + b0, 1);
        else
            bucket_expand_bits(bits + b0 / 8, len, values[2 * k], values[2 * k + 1], out + b0, 0);
    }
}

/* bits[g] = the flags x >= 0 of values 8g..8g+7, bit j for value 8g + j (the sign codes;
 * -0.0 counts as >= 0, NaN does not; the last byte's unused bits are 0); returns the sum of
 * |x| in float64 (NaN if any value is NaN) if with_sum: the scaled sign's two parts in one
 * pass. */
static inline double sign_bits(const float *restrict x, int64_t n, uint8_t *restrict bits,
                               int with_sum) {
    f64x4 sum[2] = {{0}, {0}};
    int64_t g = 0;
    for (; g < n / 8; g++) {
        f32x8 v;
        memcpy(&v, x + 8 * g, 32);
#ifdef __AVX__  /* one compare and one movemask per 8 values */
        bits[g] = (uint8_t)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + 8 * g),
                                                            _mm256_setzero_ps(), _CMP_GE_OQ));
#else
        const i32x8 flag = {1, 2, 4, 8, 16, 32, 64, 128};
        i32x8 set = (v >= 0) & flag;
        bits[g] = (uint8_t)(set[0] | set[1] | set[2] | set[3] | set[4] | set[5] | set[6] | set[7]);
#endif
        if (!with_sum)
            continue;
        u32x8 magnitude;
        memcpy(&magnitude, &v, 32);
        magnitude &= 0x7fffffffu;  /* |x|: the sign bit cleared */
        memcpy(&v, &magnitude, 32);
        for (int h = 0; h < 2; h++) {
            f32x4 half = {v[4 * h], v[4 * h + 1], v[4 * h + 2], v[4 * h + 3]};
            sum[h] += __builtin_convertvector(half, f64x4);
        }
    }
    double total = 0;
    for (int j = 0; j < 4; j++)
        total += sum[0][j] + sum[1][j];
    if (8 * g < n) {
        uint8_t last = 0;
        for (int64_t i = 8 * g; i < n; i++) {
            last |= (uint8_t)((x[i] >= 0) << (i - 8 * g));
            total += x[i] < 0 ? -(double)x[i] : (double)x[i];
        }
        bits[g] = last;
    }
    return total;
}

double lab_sign_bits(const float *x, int64_t n, uint8_t *bits, int32_t with_sum) {
    return with_sum ? sign_bits(x, n, bits, 1) : sign_bits(x, n, bits, 0);
}

/* Per bucket of `bucket` values (the last may be short): the sum of the values >= 0, the sum
 * of the others (NaN among them, so that it shows), both in float64, and the count of values
 * >= 0: the two sides of 1-bit SGD. */

static inline void bucket_side_sums(const float *v, int64_t len, double *sum_pos,
                                    double *sum_neg, int64_t *nonneg) {
    int64_t i = 0;
    f64x4 pos[2] = {{0}, {0}}, neg[2] = {{0}, {0}};
    i64x4 count[2] = {{0}, {0}};
    for (; i + 8 <= len; i += 8) {
        for (int h = 0; h < 2; h++) {  /* two independent accumulators */
            f32x4 part;
            memcpy(&part, v + i + 4 * h, 16);
            f64x4 d = __builtin_convertvector(part, f64x4);
            i64x4 is_pos = d >= 0, bits;
            memcpy(&bits, &d, 32);
            i64x4 p = bits & is_pos, q = bits & ~is_pos;
            f64x4 dp, dq;
            memcpy(&dp, &p, 32);
            memcpy(&dq, &q, 32);
            pos[h] += dp;
            neg[h] += dq;
            count[h] -= is_pos;  /* is_pos is -1 where true */
        }
    }
    double sp = 0, sn = 0;
    int64_t c = 0;
    for (int j = 0; j < 4; j++) {
        sp += pos[0][j] + pos[1][j];
        sn += neg[0][j] + neg[1][j];
        c += count[0][j] + count[1][j];
    }
    for (; i < len; i++) {
        if (v[i] >= 0) { sp += v[i]; c++; } else { sn += v[i]; }
    }
    *sum_pos = sp;
    *sum_neg = sn;
    *nonneg = c;
}

void lab_side_sums(const float *x, int64_t n, int64_t bucket, double *sums, int64_t *nonneg) {
    for (int64_t b0 = 0, k = 0; b0 < n; b0 += bucket, k++) {
        int64_t len = n - b0 < bucket ? n - b0 : bucket;
        bucket_side_sums(x + b0, len, sums + 2 * k, sums + 2 * k + 1, nonneg + k);
    }
}

/* The casts' compress: fp32 values copied (mode 0) or cast to fp16 (mode 1) or bf16 (mode 2),
 * rounding to nearest even as torch's casts do, and in the same pass the answer to the only
 * question the codec asks: is every value on the wire finite? Returns 1 if some input is Inf
 * or NaN or rounds past the half type's range, 0 if not, -1 where fp16 needs torch (no F16C). */
static inline int32_t is_special(uint32_t bits) { return (bits & 0x7f800000u) == 0x7f800000u; }

int32_t lab_cast(const float *restrict x, int64_t n, int32_t mode, void *restrict out) {
    uint32_t bad = 0;
    if (mode == 0) {
        const uint32_t *restrict u = (const uint32_t *)x;
        uint32_t *restrict o = (uint32_t *)out;
        for (int64_t i = 0; i < n; i++) {
            o[i] = u[i];
            bad |= is_special(u[i]);
        }
    } else if (mode == 2) {
        const uint32_t *restrict u = (const uint32_t *)x;
        uint16_t *restrict o = (uint16_t *)out;
        for (int64_t i = 0; i < n; i++) {
            uint32_t r = (u[i] + 0x7fffu + ((u[i] >> 16) & 1u)) >> 16;
            o[i] = (uint16_t)r;
            bad |= is_special(u[i]) | ((r & 0x7f80u) == 0x7f80u);  /* NaN may round anywhere */
        }
    } else {
#ifdef __F16C__
        /* the hardware's conversion: eight values per instruction, nearest even, sixteen a
         * step. The check reads the input, off the conversion's path: a value is Inf or NaN
         * in fp16 exactly when it is NaN or |x| >= 65520 (the midpoint between 65504, the
         * largest half, and 65536, which rounds to even, i.e. to Inf) */
        uint16_t *restrict o = (uint16_t *)out;
        const __m256 limit = _mm256_set1_ps(65520.0f);
        const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
        __m256 any0 = _mm256_setzero_ps(), any1 = _mm256_setzero_ps();
        int64_t i = 0;
#ifdef __AVX512F__
        /* where the CPU has it, sixteen values per instruction first (torch's own cast does) */
        const __m512 limit16 = _mm512_set1_ps(65520.0f);
        __mmask16 any16 = 0;
        for (; i + 16 <= n; i += 16) {
            __m512 a = _mm512_loadu_ps(x + i);
            _mm256_storeu_si256((__m256i *)(o + i), _mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT));
            any16 |= _mm512_cmp_ps_mask(_mm512_abs_ps(a), limit16, _CMP_NLT_UQ);
        }
        bad |= any16 != 0;
#endif
        for (; i + 16 <= n; i += 16) {
            __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
            _mm_storeu_si128((__m128i *)(o + i), _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT));
            _mm_storeu_si128((__m128i *)(o + i + 8), _mm256_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT));
            /* not (|x| < 65520): true for NaN too (unordered) */
            any0 = _mm256_or_ps(any0, _mm256_cmp_ps(_mm256_and_ps(a, magnitude), limit, _CMP_NLT_UQ));
            any1 = _mm256_or_ps(any1, _mm256_cmp_ps(_mm256_and_ps(b, magnitude), limit, _CMP_NLT_UQ));
        }
        bad |= _mm256_movemask_ps(_mm256_or_ps(any0, any1)) != 0;
        for (; i < n; i++) {
            o[i] = (uint16_t)_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(x[i]), _MM_FROUND_TO_NEAREST_INT), 0);
            bad |= (o[i] & 0x7c00u) == 0x7c00u;
        }
#else
        return -1;  /* torch's own vectorized cast is faster than a scalar one */
#endif
    }
    return bad != 0;
}

/* The smallest and the largest of n > 0 int32 values (a payload's index part, checked before a
 * scatter), in one pass, returned packed in one int64: max in the high 32 bits, min (as
 * unsigned) in the low ones, so that the caller reads both without a ctypes array. */
int64_t lab_int32_range(const int32_t *restrict x, int64_t n) {
    if (n <= 0)
        return 0;
    int32_t lo = x[0], hi = x[0];
    for (int64_t i = 0; i < n; i++) {  /* min/max reductions: the compiler vectorizes them */
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    return (int64_t)(((uint64_t)(uint32_t)hi << 32) | (uint32_t)lo);
}

/* The sparse codecs' decode: out[idx[i]] = v[i] for i < k (out zeroed by the caller), each
 * index checked against [0, n) in the same pass, before its write: the payload check's range
 * test fused into the scatter (one read of the indices, not two). Returns 0, or i + 1 for the
 * first index out of range (nothing written from there on; the caller drops out). */
int64_t lab_scatter(const float *restrict v, const int32_t *restrict idx, int64_t k, int64_t n,
                    float *restrict out) {
    for (int64_t i = 0; i < k; i++) {
        uint32_t j = (uint32_t)idx[i];  /* a negative index wraps to >= 2^31 > n */
        if ((int64_t)j >= n)
            return i + 1;
        out[j] = v[i];
    }
    return 0;
}

/* The smallest and the largest of n > 0 float32 values (a payload's header part: norms,
 * scales, checked finite before a decode scales by them), both NaN if any value is NaN,
 * returned packed in one int64: max's bits in the high 32, min's in the low 32. */
int64_t lab_float32_range(const float *restrict x, int64_t n) {
    if (n <= 0)
        return 0;
    float lo = x[0], hi = x[0];
    int32_t nan = 0;
    for (int64_t i = 0; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
        nan |= x[i] != x[i];
    }
    uint32_t a, b;
    if (nan) {
        a = b = 0x7fc00000u;  /* a quiet NaN */
    } else {
        memcpy(&a, &lo, 4);
        memcpy(&b, &hi, 4);
    }
    return (int64_t)(((uint64_t)b << 32) | a);
}

/* out[i] = table[code i] for n 2-bit codes packed four a byte, code i at bits 2(i mod 4) of
 * byte i / 4 (what pack_uint(codes, 2) writes): TernGrad's decoder, table {0, s, -s, 0}.
 * Each byte's four values come from a 256-row table built first (4 KiB), 16 bytes a copy. */
void lab_expand_codes2(const uint8_t *restrict packed, int64_t n, const float *table,
                       float *restrict out) {
    float rows[256][4];
    for (int b = 0; b < 256; b++)
        for (int j = 0; j < 4; j++)
            rows[b][j] = table[(b >> (2 * j)) & 3];
    int64_t g = 0;
    for (; g < n / 4; g++)
        memcpy(out + 4 * g, rows[packed[g]], 16);
    for (int64_t i = 4 * g; i < n; i++)
        out[i] = rows[packed[g]][i - 4 * g];
}

/* The small-tensor kernels and the selections that reproduce torch's, in files of their own;
 * one translation unit, since they use the static helpers above. */
#include "kernels_small.c"
#include "kernels_select.c"
