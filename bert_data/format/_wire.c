/* bert_data.format._wire: the hot loops of reading TFRecords of one known layout, in C.
 *
 * Optional accelerator of bert_data/format/batch_decode.py and checks.py (built when a C compiler is
 * present, skipped otherwise): those modules keep the numpy implementations of every function,
 * use them when this module is missing (batch_decode._wire is None), and the tests check that both
 * give the same answers on random and damaged input. No numpy headers: arrays come and go
 * through the buffer protocol, so building needs nothing but Python's own headers. Little-endian
 * machines only (the import fails elsewhere, and numpy is used).
 *
 * cut_frames(data, starts_out, lengths_out) -> (count, end, bad)
 *     Walk the TFRecord frames at the start of `data` (uint64 length, masked CRC32C of the length,
 *     payload, masked CRC32C of the payload), checking both CRCs of each. Fills payload starts and
 *     lengths (int64) of the whole valid frames; `end` is the offset after the last of them.
 *     `bad` is 1 when the walk stopped at a damaged frame (a CRC that does not match, or an
 *     incomplete frame at the end whose 12-byte header is not a valid header), 0 when it stopped
 *     at the end of `data` or at an incomplete frame that may continue in the next chunk.
 *
 * decode_fixed(data, starts, lengths, keys, kinds, counts, outs, ok_out, small) -> wide
 *     Decode tf.train.Example payloads laid out exactly as our writer (and TensorFlow's
 *     deterministic serialization) lays them out: one Features message, then per feature, in the
 *     given order, `0a E <key> F <tag> L 0a P <payload>` where <key> is `keys[f]` (the entry's
 *     constant bytes up to and including the Feature's tag 0x12), <tag> is 0x1a (Int64List) or
 *     0x12 (FloatList), E, F, L and P are varint lengths (at most 5 bytes) that all end where the
 *     entry ends, and the payload holds exactly `counts[f]` values: varints of at most 9 bytes
 *     (values below 2**63) or little-endian float32s. ok_out[r] is 1 for each record that is
 *     exactly that; its values are written to row r of outs[f] (int64, or int32 with `small`,
 *     float32 for floats). `small` is a bit mask: feature f is written as int32 when bit f is
 *     set, else int64. Returns the bit mask ("wide") of the int32 features that have a value of
 *     2**28 or more in a record that is ok (the caller decodes those again as int64).
 *
 * clean_rows(arrays, params, kinds, real_out, pred_out) -> None or sums
 *     bert_data.format.checks.clean_batch for the int32 arrays decode_fixed gives: proves that
 *     every record of a batch passes every check of check_records and sums its statistics, in one
 *     pass per record; None when that is not proven (the caller then runs check_records, which
 *     says which records fail and why). The arguments are documented at the function.
 *
 * All three release the GIL while they work.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ---------------------------------------------------------------- CRC32C (Castagnoli) */

static uint32_t crc_table[8][256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

static uint32_t crc_sliced(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    while (n && ((uintptr_t)p & 7)) { c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8); n--; }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= c; /* the first 4 bytes are the low ones: little-endian (see PyInit__wire) */
        c = crc_table[7][w & 0xFF] ^ crc_table[6][(w >> 8) & 0xFF] ^ crc_table[5][(w >> 16) & 0xFF] ^
            crc_table[4][(w >> 24) & 0xFF] ^ crc_table[3][(w >> 32) & 0xFF] ^ crc_table[2][(w >> 40) & 0xFF] ^
            crc_table[1][(w >> 48) & 0xFF] ^ crc_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_HW_CRC 1
__attribute__((target("sse4.2"))) static uint32_t crc_hw(const uint8_t *p, size_t n) {
    uint64_t c = 0xFFFFFFFFu;
    while (n && ((uintptr_t)p & 7)) { c = __builtin_ia32_crc32qi((uint32_t)c, *p++); n--; }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
        p += 8;
        n -= 8;
    }
    while (n--) c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    return (uint32_t)c ^ 0xFFFFFFFFu;
}
#endif

typedef uint32_t (*crc_fn)(const uint8_t *, size_t);
static crc_fn crc32c = crc_sliced;
static const char *crc_name = "slice-by-8";

static void crc_choose(void) {
    crc_init();
#ifdef HAVE_HW_CRC
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) { crc32c = crc_hw; crc_name = "sse4.2"; }
#endif
}

static uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u; }

static uint32_t load32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

static uint64_t load64(const uint8_t *p) { return (uint64_t)load32(p) | (uint64_t)load32(p + 4) << 32; }

/* ---------------------------------------------------------------- buffers */

/* A Py_buffer of at least `need` bytes, writable when asked; returns 0 and sets an error if not. */
static int get_buffer(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t need, const char *what) {
    if (PyObject_GetBuffer(obj, view, (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS) < 0) return 0;
    if (view->len < need) {
        PyErr_Format(PyExc_ValueError, "%s: buffer of %zd bytes, need %zd", what, view->len, need);
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------- cut_frames */

static PyObject *cut_frames(PyObject *self, PyObject *args) {
    PyObject *data_obj, *starts_obj, *lengths_obj;
    if (!PyArg_ParseTuple(args, "OOO", &data_obj, &starts_obj, &lengths_obj)) return NULL;
    Py_buffer data, starts, lengths;
    if (!get_buffer(data_obj, &data, 0, 0, "data")) return NULL;
    Py_ssize_t cap = data.len / 16 + 1; /* a frame is at least 16 bytes */
    if (!get_buffer(starts_obj, &starts, 1, cap * 8, "starts_out")) { PyBuffer_Release(&data); return NULL; }
    if (!get_buffer(lengths_obj, &lengths, 1, cap * 8, "lengths_out")) {
        PyBuffer_Release(&data);
        PyBuffer_Release(&starts);
        return NULL;
    }
    const uint8_t *u8 = (const uint8_t *)data.buf;
    uint64_t size = (uint64_t)data.len, pos = 0;
    int64_t *s_out = (int64_t *)starts.buf, *l_out = (int64_t *)lengths.buf;
    Py_ssize_t count = 0;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    while (pos + 12 <= size) {
        uint64_t length = load64(u8 + pos);
        if (masked(crc32c(u8 + pos, 8)) != load32(u8 + pos + 8)) { bad = 1; break; }
        if (length > size - pos - 12 || size - pos - 12 - length < 4) break; /* incomplete: the next chunk */
        const uint8_t *payload = u8 + pos + 12;
        if (masked(crc32c(payload, (size_t)length)) != load32(payload + length)) { bad = 1; break; }
        s_out[count] = (int64_t)(pos + 12);
        l_out[count] = (int64_t)length;
        count++;
        pos += 16 + length;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&lengths);
    return Py_BuildValue("nKi", count, (unsigned long long)pos, bad);
}

/* ---------------------------------------------------------------- decode_fixed */

#define MAX_FEATURES 64
enum { KIND_INT = 0, KIND_FLOAT = 1 };

typedef struct {
    const uint8_t *key;
    Py_ssize_t key_len;
    int kind;
    Py_ssize_t count;
    char *out; /* row r starts at out + r * count * item */
    Py_ssize_t item;
} Feature;

/* A message length of at most 5 bytes at *p (not past end); 0 if there is none. */
static int length_varint(const uint8_t **p, const uint8_t *end, uint64_t *value) {
    uint64_t v = 0;
    const uint8_t *q = *p;
    for (int j = 0; j < 5; j++) {
        if (q >= end) return 0;
        uint8_t b = *q++;
        v |= (uint64_t)(b & 0x7F) << (7 * j);
        if (b < 0x80) { *p = q; *value = v; return 1; }
    }
    return 0;
}

#if defined(__GNUC__) || defined(__clang__)
#define CTZ64(x) __builtin_ctzll(x)
#else
static int CTZ64(uint64_t x) { int n = 0; while (!(x & 1)) { x >>= 1; n++; } return n; }
#endif

#define HIGH_BITS 0x8080808080808080ULL

/* Exactly f->count varints of at most 9 bytes filling [p, end), into row `out`. Returns 0 when
 * the payload is not that; sets *wide when the output is int32 and some value is 2**28 or more.
 * `limit` is the end of the whole buffer: 8-byte words are read while they fit before it (the
 * bytes past `end` never count: a varint that does not end by `end` is refused).
 * Word at a time, because token ids mix 1- and 2-byte varints at random and a branch per byte
 * mispredicts: eight 1-byte values are copied at once, and a varint of at most 4 bytes is
 * found (its first byte below 0x80) and put together without a branch. */
static int int_payload(const uint8_t *p, const uint8_t *end, const uint8_t *limit, const Feature *f, char *out,
                       int *wide) {
    const int small = f->item == 4;
    Py_ssize_t n = 0, k = f->count;
    int32_t *o32 = (int32_t *)out;
    int64_t *o64 = (int64_t *)out;
    uint64_t seen = 0; /* every value ORed: is any 2**28 or more */
    while (p < end) {
        if (n == k) return 0;
        uint64_t v = 0;
        if (limit - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            uint64_t stops = ~w & HIGH_BITS; /* the bytes that end a varint */
            if (stops == HIGH_BITS && k - n >= 8 && end - p >= 8) {
                if (small)
                    for (int j = 0; j < 8; j++) o32[n + j] = (int32_t)((w >> (8 * j)) & 0x7F);
                else
                    for (int j = 0; j < 8; j++) o64[n + j] = (int64_t)((w >> (8 * j)) & 0x7F);
                n += 8;
                p += 8;
                continue;
            }
            int len = stops ? (CTZ64(stops) >> 3) + 1 : 9;
            if (len <= 4) {
                if (len > end - p) return 0;
                uint64_t x = w & ((1ULL << (8 * len)) - 1);
                v = (x & 0x7F) | ((x >> 1) & 0x3F80) | ((x >> 2) & 0x1FC000) | ((x >> 3) & 0xFE00000);
                p += len;
                goto store;
            }
        }
        for (int j = 0;; j++) { /* the general case: byte by byte, at most 9 bytes */
            if (p >= end || j == 9) return 0;
            uint8_t b = *p++;
            v |= (uint64_t)(b & 0x7F) << (7 * j);
            if (b < 0x80) break;
        }
    store:
        seen |= v;
        if (small)
            o32[n] = (int32_t)v;
        else
            o64[n] = (int64_t)v;
        n++;
    }
    if (small && seen >= (1u << 28)) *wide = 1;
    return n == k;
}

/* One record [p, end): 1 when it is exactly the layout (values written to row `row`). */
static int decode_record(const uint8_t *p, const uint8_t *end, const uint8_t *limit, const Feature *features,
                         int n_features, Py_ssize_t row, uint64_t *wide) {
    uint64_t size;
    if (p >= end || *p++ != 0x0a) return 0;
    if (!length_varint(&p, end, &size) || size != (uint64_t)(end - p)) return 0;
    uint64_t row_wide = 0;
    for (int i = 0; i < n_features; i++) {
        const Feature *f = &features[i];
        uint64_t entry, inner;
        if (p >= end || *p++ != 0x0a) return 0;
        if (!length_varint(&p, end, &entry) || entry > (uint64_t)(end - p)) return 0;
        const uint8_t *entry_end = p + entry;
        if (f->key_len > entry_end - p || memcmp(p, f->key, (size_t)f->key_len) != 0) return 0;
        p += f->key_len;
        const uint8_t tags[2] = {f->kind == KIND_INT ? 0x1a : 0x12, 0x0a};
        for (int t = 0; t < 3; t++) { /* the Feature, the list, the packed values */
            if (!length_varint(&p, entry_end, &inner) || inner != (uint64_t)(entry_end - p)) return 0;
            if (t < 2 && (p >= entry_end || *p++ != tags[t])) return 0;
        }
        char *out = f->out + row * f->count * f->item;
        if (f->kind == KIND_FLOAT) {
            if (entry_end - p != 4 * f->count) return 0;
            memcpy(out, p, (size_t)(4 * f->count)); /* little-endian float32: see module init */
        } else {
            int feature_wide = 0;
            if (!int_payload(p, entry_end, limit, f, out, &feature_wide)) return 0;
            if (feature_wide) row_wide |= (uint64_t)1 << i;
        }
        p = entry_end;
    }
    if (p != end) return 0;
    *wide |= row_wide;
    return 1;
}

static void release_all(Py_buffer *views, int n) {
    for (int i = 0; i < n; i++) PyBuffer_Release(&views[i]);
}

/* Parses decode_fixed's arguments into `features` and the views (released by the caller). */
static int feature_args(PyObject *keys, PyObject *kinds, PyObject *counts, PyObject *outs, Py_ssize_t n, uint64_t small,
                        Feature *features, Py_buffer *views, int *n_views, int *n_features) {
    if (!PyTuple_Check(keys) || !PyBytes_Check(kinds) || !PyTuple_Check(counts) || !PyTuple_Check(outs)) {
        PyErr_SetString(PyExc_TypeError, "decode_fixed: keys, counts and outs are tuples, kinds is bytes");
        return 0;
    }
    Py_ssize_t nf = PyTuple_GET_SIZE(keys);
    if (nf > MAX_FEATURES || PyBytes_GET_SIZE(kinds) != nf || PyTuple_GET_SIZE(counts) != nf || PyTuple_GET_SIZE(outs) != nf) {
        PyErr_SetString(PyExc_ValueError, "decode_fixed: keys, kinds, counts and outs differ in length (or over 64 features)");
        return 0;
    }
    for (Py_ssize_t i = 0; i < nf; i++) {
        Feature *f = &features[i];
        PyObject *key = PyTuple_GET_ITEM(keys, i);
        if (!PyBytes_Check(key)) { PyErr_SetString(PyExc_TypeError, "decode_fixed: keys are bytes"); return 0; }
        f->key = (const uint8_t *)PyBytes_AS_STRING(key);
        f->key_len = PyBytes_GET_SIZE(key);
        f->kind = PyBytes_AS_STRING(kinds)[i] == 'f' ? KIND_FLOAT : KIND_INT;
        f->count = PyLong_AsSsize_t(PyTuple_GET_ITEM(counts, i));
        if (f->count < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "decode_fixed: negative count");
            return 0;
        }
        f->item = f->kind == KIND_FLOAT ? 4 : (((small >> i) & 1) ? 4 : 8);
        if (!get_buffer(PyTuple_GET_ITEM(outs, i), &views[*n_views], 1, n * f->count * f->item, "outs")) return 0;
        f->out = (char *)views[(*n_views)++].buf;
    }
    *n_features = (int)nf;
    return 1;
}

static PyObject *decode_fixed(PyObject *self, PyObject *args) {
    PyObject *data_obj, *starts_obj, *lengths_obj, *keys, *kinds, *counts, *outs, *ok_obj;
    unsigned long long small;
    if (!PyArg_ParseTuple(args, "OOOOOOOOK", &data_obj, &starts_obj, &lengths_obj, &keys, &kinds, &counts, &outs, &ok_obj,
                          &small))
        return NULL;
    Py_buffer views[MAX_FEATURES + 4];
    int n_views = 0, n_features = 0;
    Feature features[MAX_FEATURES];
    if (!get_buffer(starts_obj, &views[n_views], 0, 0, "starts")) return NULL;
    n_views++;
    Py_ssize_t n = views[0].len / 8;
    if (!get_buffer(lengths_obj, &views[n_views], 0, n * 8, "lengths")) goto fail;
    n_views++;
    if (!get_buffer(data_obj, &views[n_views], 0, 0, "data")) goto fail;
    n_views++;
    if (!get_buffer(ok_obj, &views[n_views], 1, n, "ok_out")) goto fail;
    n_views++;
    if (!feature_args(keys, kinds, counts, outs, n, small, features, views, &n_views, &n_features)) goto fail;
    const int64_t *starts = (const int64_t *)views[0].buf, *lengths = (const int64_t *)views[1].buf;
    const uint8_t *u8 = (const uint8_t *)views[2].buf;
    uint64_t size = (uint64_t)views[2].len;
    uint8_t *ok = (uint8_t *)views[3].buf;
    uint64_t wide = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < n; r++) {
        uint64_t s = (uint64_t)starts[r], l = (uint64_t)lengths[r];
        if (starts[r] < 0 || lengths[r] < 0 || s > size || l > size - s) { ok[r] = 0; continue; }
        ok[r] = (uint8_t)decode_record(u8 + s, u8 + s + l, u8 + size, features, n_features, r, &wide);
    }
    Py_END_ALLOW_THREADS
    release_all(views, n_views);
    return PyLong_FromUnsignedLongLong(wide);
fail:
    release_all(views, n_views);
    return NULL;
}

/* ---------------------------------------------------------------- clean_rows */

/* What clean_rows needs besides the arrays (see bert_data.format.checks._clean_batch_c). */
typedef struct {
    Py_ssize_t n, seq, slots;
    long long cls, sep, mask, size;
    long long mids_not; /* a prediction's original may not be this id (-1: no such rule) */
    int paired, masked, count_seps;
    unsigned kind_special, kind_unk, kind_cls, kind_sep;
    const int32_t *ids, *input_mask, *segments, *labels, *pos, *mids;
    const float *weights;
    const uint8_t *kinds;
} Clean;

typedef struct {
    long long shown, kept, predictions, real_tokens, unk_tokens;
} CleanSums;

/* The masked-LM checks of row r (run length `real`, first segment's last position `end_a`);
 * puts its predictions and [MASK]/kept counts in *row; returns 0 when a check fails. */
static int clean_predictions(const Clean *c, Py_ssize_t r, long long real, long long end_a, CleanSums *row) {
    const int32_t *pos = c->pos + r * c->slots, *mids = c->mids + r * c->slots, *id = c->ids + r * c->seq;
    const float *w = c->weights + r * c->slots;
    Py_ssize_t p = 0;
    while (p < c->slots && pos[p] != 0) p++;
    long long shown = 0, kept = 0;
    for (Py_ssize_t j = 0; j < c->slots; j++) {
        long long at = pos[j], orig = mids[j];
        if (at < 0 || at >= real || orig < 0 || orig >= c->size) return 0;
        if (j >= p) {
            if (at != 0 || orig != 0 || w[j] != 0.0f) return 0;
            continue;
        }
        if (w[j] != 1.0f || (j && at <= pos[j - 1])) return 0; /* weights 1.0, positions ascending */
        if (at == real - 1 || at == end_a || orig == c->sep || orig == c->mids_not) return 0;
        long long current = id[at];
        if (current == c->mask) shown++;
        else if (current == orig) kept++;
    }
    row->shown = shown;
    row->kept = kept;
    row->predictions = p;
    return 1;
}

/* Every check of row r; 0 when one fails. Branch-free loops that OR a `bad` flag: the row is
 * judged once at the end (a valid row, the usual case, runs every loop to the end anyway). */
static int clean_row(const Clean *c, Py_ssize_t r, int64_t *real_out, int64_t *pred_out, CleanSums *sums) {
    const int32_t *id = c->ids + r * c->seq, *m = c->input_mask + r * c->seq;
    const Py_ssize_t seq = c->seq;
    long long total = 0;
    for (Py_ssize_t i = 0; i < seq; i++) total += m[i];
    if (total <= 0 || total > seq) return 0;
    const Py_ssize_t real = (Py_ssize_t)total; /* input_mask must be `real` 1s, then 0s */
    const uint32_t size = (uint32_t)c->size;
    const int32_t mask_id = (int32_t)c->mask;
    unsigned bad = 0;
    long long masks = 0, cls = 0, seps = 0, plain = 0, unk = 0;
    for (Py_ssize_t i = 0; i < real; i++) {
        const int32_t v = id[i];
        const unsigned outside = (uint32_t)v >= size; /* a negative id too */
        const unsigned kind = c->kinds[outside ? 0 : v];
        bad |= (unsigned)(m[i] != 1) | outside;
        masks += v == mask_id;
        cls += (kind & c->kind_cls) != 0;
        seps += (kind & c->kind_sep) != 0;
        plain += (kind & c->kind_special) == 0;
        unk += kind == c->kind_unk;
    }
    for (Py_ssize_t i = real; i < seq; i++) bad |= (unsigned)(m[i] != 0) | (unsigned)(id[i] != 0);
    if (bad || id[0] != c->cls || id[real - 1] != c->sep) return 0;
    long long end_a = real - 1;
    if (c->paired) { /* segment_ids: len_a 0s, then 1s to the end of the run, then 0s */
        const int32_t *seg = c->segments + r * seq;
        long long ones = 0;
        for (Py_ssize_t i = 0; i < seq; i++) ones += seg[i];
        const long long len_a = real - ones;
        if (len_a <= 0 || len_a >= real) return 0;
        for (Py_ssize_t i = 0; i < seq; i++) bad |= (unsigned)(seg[i] != (i >= len_a && i < real));
        end_a = len_a - 1;
        if (bad || id[end_a] != c->sep || c->labels[r] < 0 || c->labels[r] > 1) return 0;
    } else if (real < 3) {
        return 0;
    }
    CleanSums row = {0, 0, 0, 0, 0}; /* the row's predictions: none when unmasked */
    if (c->masked) {
        if (!clean_predictions(c, r, real, end_a, &row)) return 0;
        /* the kinds above are of the ids shown; at a prediction the original id is masked_lm_ids */
        const int32_t *pos = c->pos + r * c->slots, *mids = c->mids + r * c->slots;
        for (Py_ssize_t j = 0; j < row.predictions; j++) {
            const unsigned now = c->kinds[id[pos[j]]], was = c->kinds[mids[j]];
            cls += ((was & c->kind_cls) != 0) - ((now & c->kind_cls) != 0);
            seps += ((was & c->kind_sep) != 0) - ((now & c->kind_sep) != 0);
            plain += ((was & c->kind_special) == 0) - ((now & c->kind_special) == 0);
            unk += (was == c->kind_unk) - (now == c->kind_unk);
        }
    }
    /* a [MASK] where no prediction is; a [CLS] or [SEP] besides the layout's */
    if (masks != row.shown || cls != 1 || (c->count_seps && seps != (c->paired ? 2 : 1))) return 0;
    sums->shown += row.shown;
    sums->kept += row.kept;
    sums->predictions += row.predictions;
    sums->real_tokens += plain;
    sums->unk_tokens += unk;
    real_out[r] = real;
    pred_out[r] = row.predictions;
    return 1;
}

/* clean_rows(arrays, params, kinds, real_out, pred_out) -> None, or (shown, kept, random,
 * real_tokens, unk_tokens). `arrays`: (input_ids, input_mask, segment_ids, next_sentence_labels,
 * masked_lm_positions, masked_lm_ids, masked_lm_weights), C-contiguous int32 (float32 weights),
 * None where the layout has no such feature; `params`: (n, seq, slots, cls, sep, mask, size,
 * mids_not, paired, masked, count_seps, kind_special, kind_unk, kind_cls, kind_sep). */
static PyObject *clean_rows(PyObject *self, PyObject *args) {
    PyObject *arrays, *params, *kinds_obj, *real_obj, *pred_obj;
    Clean c;
    memset(&c, 0, sizeof c);
    if (!PyArg_ParseTuple(args, "O!O!OOO", &PyTuple_Type, &arrays, &PyTuple_Type, &params, &kinds_obj, &real_obj, &pred_obj))
        return NULL;
    if (!PyArg_ParseTuple(params, "nnnLLLLLpppIIII", &c.n, &c.seq, &c.slots, &c.cls, &c.sep, &c.mask, &c.size, &c.mids_not,
                          &c.paired, &c.masked, &c.count_seps, &c.kind_special, &c.kind_unk, &c.kind_cls, &c.kind_sep))
        return NULL;
    if (PyTuple_GET_SIZE(arrays) != 7 || c.n < 0 || c.seq < 0 || c.slots < 0 || c.size <= 0 || c.size > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "clean_rows: 7 arrays, non-negative sizes and a vocabulary of 1 to 2**31-1 ids");
        return NULL;
    }
    Py_buffer views[10];
    int n_views = 0;
    const void *bufs[7] = {0};
    /* the element counts each array must hold */
    const Py_ssize_t need[7] = {c.n * c.seq, c.n * c.seq, c.n * c.seq, c.n, c.n * c.slots, c.n * c.slots, c.n * c.slots};
    const int required[7] = {1, 1, c.paired, c.paired, c.masked, c.masked, c.masked};
    for (int a = 0; a < 7; a++) {
        PyObject *obj = PyTuple_GET_ITEM(arrays, a);
        if (obj == Py_None) {
            if (required[a]) { PyErr_SetString(PyExc_ValueError, "clean_rows: a feature of the layout is missing"); goto fail; }
            continue;
        }
        if (!get_buffer(obj, &views[n_views], 0, need[a] * 4, "clean_rows array")) goto fail;
        bufs[a] = views[n_views++].buf;
    }
    if (!get_buffer(kinds_obj, &views[n_views], 0, c.size, "kinds")) goto fail;
    c.kinds = (const uint8_t *)views[n_views++].buf;
    if (!get_buffer(real_obj, &views[n_views], 1, c.n * 8, "real_out")) goto fail;
    int64_t *real_out = (int64_t *)views[n_views++].buf;
    if (!get_buffer(pred_obj, &views[n_views], 1, c.n * 8, "pred_out")) goto fail;
    int64_t *pred_out = (int64_t *)views[n_views++].buf;
    c.ids = bufs[0], c.input_mask = bufs[1], c.segments = bufs[2], c.labels = bufs[3];
    c.pos = bufs[4], c.mids = bufs[5], c.weights = bufs[6];
    CleanSums sums = {0, 0, 0, 0, 0};
    int clean = 1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < c.n && clean; r++) clean = clean_row(&c, r, real_out, pred_out, &sums);
    Py_END_ALLOW_THREADS
    release_all(views, n_views);
    if (!clean) Py_RETURN_NONE;
    return Py_BuildValue("LLLLL", sums.shown, sums.kept, sums.predictions - sums.shown - sums.kept, sums.real_tokens,
                         sums.unk_tokens);
fail:
    release_all(views, n_views);
    return NULL;
}

static PyObject *crc32c_py(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (!get_buffer(arg, &view, 0, 0, "data")) return NULL;
    uint32_t c = crc32c((const uint8_t *)view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

static PyMethodDef methods[] = {
    {"cut_frames", cut_frames, METH_VARARGS, "(data, starts_out, lengths_out) -> (count, end, bad)"},
    {"decode_fixed", decode_fixed, METH_VARARGS,
     "(data, starts, lengths, keys, kinds, counts, outs, ok_out, small) -> wide"},
    {"clean_rows", clean_rows, METH_VARARGS, "(arrays, params, kinds, real_out, pred_out) -> None or sums"},
    {"crc32c", crc32c_py, METH_O, "CRC32C of a bytes-like object"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_wire", "bert_data's compiled TFRecord reading loops", -1, methods};

PyMODINIT_FUNC PyInit__wire(void) {
    const uint16_t probe = 1;
    if (*(const uint8_t *)&probe != 1) {
        PyErr_SetString(PyExc_ImportError, "bert_data.format._wire assumes a little-endian machine");
        return NULL;
    }
    crc_choose();
    PyObject *m = PyModule_Create(&module);
    /* batch_decode.py uses the module only when API equals its own WIRE_API: raise both together when
     * a function's arguments or results change, so that a stale build is never called */
    if (m && PyModule_AddIntConstant(m, "API", 1) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (m && PyModule_AddStringConstant(m, "CRC32C", crc_name) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
