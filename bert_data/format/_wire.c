/* bert_data.format._wire: the hot loops of reading TFRecords of one known layout, and of writing
 * them, in C.
 *
 * Optional accelerator of bert_data/format/batch_decode.py and checks.py (reading),
 * example_wire.py, tfrecord.py, bert_data/instances.py, windows.py and masking.py (writing), bound
 * once by native.py (built when a C compiler is present, skipped otherwise): those modules keep the
 * numpy implementations of every function, use them when this module is missing
 * (batch_decode._wire, native._wire is None), and the tests check that both give the same answers
 * (the writers: the same bytes) on random and damaged input. No numpy headers: arrays come and go
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
 *
 * serialize_examples(arrays, prefixes, kinds) -> list of bytes
 *     The tf.train.Example of each row of a batch (bert_data.format.example_wire.serialize_examples'
 *     bytes): per record, its values are written to a scratch buffer and measured, then one bytes
 *     object is written. Documented at the function.
 *
 * serialize_shard_runs(arrays, prefixes, kinds, shard_of_row, num_shards) -> list of bytes
 *     The same records, each in its TFRecord frame, one bytes object per shard, the rows read in
 *     batch order (what a worker writes: bert_data.format.encoders.ExampleEncoder.encode_shard_runs).
 *
 * frame_records(payloads) -> bytes
 *     TFRecord frames of a sequence of payloads (bert_data.format.tfrecord.frame_records' bytes).
 *
 * assemble_pairs(...) -> ok, assemble_windows(...) -> ok, choose_rows(...) -> ok, replace_rows(...)
 *     bert_data.instances.assemble's and bert_data.windows.assemble_windows' rows, and
 *     bert_data.masking.mask_batch's choice (its keys drawn here from the caller's numpy
 *     BitGenerator, as rng.random would draw them) and replacements (on the caller's later draws),
 *     documented at the functions; False sends the caller to its numpy path (a plan that does not
 *     fit; a tie between keys).
 *
 * plan_pairs(...) -> None or (state, n, counters...)
 *     bert_data.instances.plan_pairs for one pass (NSP or SOP pairs and their counters), on the
 *     state of the caller's random.Random: CPython's Mersenne Twister and the draws random(),
 *     randint() and getrandbits() make of it, bit for bit, so the pairs are Python's and the
 *     state handed back is the one Python's planner leaves (documented at the function). None
 *     sends the caller to Python's planner. mt_draws(...) runs the generator alone (tests).
 *
 * mds_shard_frames(...), parquet_page(...), nvidia_run(...) -> bytes (a list of them) or None
 *     The output formats' own bytes, made by the workers from a batch's padded rows: MDS samples
 *     in TFRecord frames, a Parquet data page, a run of NVIDIA's HDF5 samples in one frame
 *     (bert_data.format.mds, .parquet, .nvidia_hdf5: numpy the reference, byte for byte). None
 *     sends the caller to numpy, which says what a row it declined breaks.
 *
 * The writers hold the GIL (they are called from one thread, and the serializers and framing
 * make Python objects as they go); plan_pairs and choose_rows release it while they work.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <math.h>
#include <string.h>
#include <limits.h>

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
/* Three streams at once: the crc32 instruction takes 3 cycles and the next one waits for it, so
 * a run of 3 CRC_K bytes is taken as three CRC_K-byte streams, one instruction of each in turn
 * (three in flight), the first two then moved over the bytes after them by linear maps (a CRC
 * register advanced over n zero bytes is linear in the register: crc_shift_k / crc_shift_2k, four
 * tables of 256 each, made at module init) and xored: crc(c, A B C) = Z_2K(crc(c, A)) ^
 * Z_K(crc(0, B)) ^ crc(0, C). About 2.5 times one stream's speed on a record of MSL 512. */
enum { CRC_K = 256 };
static uint32_t crc_shift_k[4][256], crc_shift_2k[4][256];

__attribute__((target("sse4.2"))) static uint32_t crc_zeros(uint32_t c, size_t n) {
    uint64_t r = c;
    for (; n >= 8; n -= 8) r = __builtin_ia32_crc32di(r, 0);
    while (n--) r = __builtin_ia32_crc32qi((uint32_t)r, 0);
    return (uint32_t)r;
}

static void crc_shift_tables(void) {
    for (int i = 0; i < 4; i++)
        for (uint32_t b = 0; b < 256; b++) {
            crc_shift_k[i][b] = crc_zeros(b << (8 * i), CRC_K);
            crc_shift_2k[i][b] = crc_zeros(b << (8 * i), 2 * CRC_K);
        }
}

static inline uint32_t crc_shifted(const uint32_t t[4][256], uint32_t c) {
    return t[0][c & 0xFF] ^ t[1][(c >> 8) & 0xFF] ^ t[2][(c >> 16) & 0xFF] ^ t[3][c >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t crc_hw(const uint8_t *p, size_t n) {
    uint64_t c = 0xFFFFFFFFu;
    while (n && ((uintptr_t)p & 7)) { c = __builtin_ia32_crc32qi((uint32_t)c, *p++); n--; }
    for (; n >= 3 * CRC_K; p += 3 * CRC_K, n -= 3 * CRC_K) {
        uint64_t c1 = 0, c2 = 0;
        for (size_t i = 0; i < CRC_K; i += 8) {
            uint64_t w0, w1, w2;
            memcpy(&w0, p + i, 8);
            memcpy(&w1, p + CRC_K + i, 8);
            memcpy(&w2, p + 2 * CRC_K + i, 8);
            c = __builtin_ia32_crc32di(c, w0);
            c1 = __builtin_ia32_crc32di(c1, w1);
            c2 = __builtin_ia32_crc32di(c2, w2);
        }
        c = crc_shifted(crc_shift_2k, (uint32_t)c) ^ crc_shifted(crc_shift_k, (uint32_t)c1) ^ (uint32_t)c2;
    }
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
    if (__builtin_cpu_supports("sse4.2")) {
        crc_shift_tables();
        crc32c = crc_hw;
        crc_name = "sse4.2";
    }
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

/* ---------------------------------------------------------------- the write path */

#if defined(__GNUC__) || defined(__clang__)
#define CLZ64(x) __builtin_clzll(x)
#else
static int CLZ64(uint64_t x) { int n = 0; while (!(x & 0x8000000000000000ULL)) { x <<= 1; n++; } return n; }
#endif

/* Bytes of the protobuf varint of v (1 to 10), without a branch. */
static inline uint64_t varint_len(uint64_t v) { return (uint64_t)(70 - CLZ64(v | 1)) / 7; }

static inline uint8_t *put_varint(uint8_t *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* One feature of serialize_examples: its row-major values and the constant bytes of its map entry. */
typedef struct {
    const char *values; /* row r starts at values + r * count * item; a runs feature's [lo, hi, width] at values + 24 r */
    Py_ssize_t count, item; /* a runs feature: its widest row's width, 8 */
    int is_float, is_runs; /* kind 'f' (float32 values), 'r' (a row of 0/1 values given as its run of ones) */
    const uint8_t *prefix; /* 0a <key length> <key> 12: the entry up to its Feature's length */
    Py_ssize_t prefix_len;
    /* the current record's values, its lengths: packed values, the list, the Feature, the map entry */
    uint64_t values_now, payload, list, feature, entry;
    const uint8_t *at; /* the current record's payload: in the scratch buffer, or the row itself (floats) */
} WFeature;

/* An int64 value as protobuf writes it: negative values as their 64-bit two's complement. */
static inline uint64_t int_value(const char *row, Py_ssize_t i, Py_ssize_t item) {
    return item == 4 ? (uint64_t)(int64_t)((const int32_t *)row)[i] : (uint64_t)((const int64_t *)row)[i];
}

/* Values [0, count) of an integer feature's row as packed varints at p (a scratch buffer with
 * SCRATCH_SLACK bytes to spare); returns the end. Blocks of eight values below 0x80 (masks,
 * segments, padding) are copied a byte each; a block with a larger value writes each value below
 * 2**21 (token ids) without a branch: 3 bytes always, p moved by its length (the bytes past it
 * are written over by what follows, or are slack). */
#define SCRATCH_SLACK 16
static inline uint8_t *put_small(uint8_t *p, uint64_t v) {
    if (v >= 0x200000) return put_varint(p, v);
    const uint32_t x = (uint32_t)v, two = x >= 0x80, three = x >= 0x4000;
    p[0] = (uint8_t)((x & 0x7F) | (two << 7));
    p[1] = (uint8_t)(((x >> 7) & 0x7F) | (three << 7));
    p[2] = (uint8_t)(x >> 14);
    return p + 1 + two + three;
}

#ifdef HAVE_HW_CRC
#include <immintrin.h>
#define HAVE_SIMD_VARINTS 1
/* Blocks of four values below 2**21 (token ids) as varints with SSSE3: each value's three bytes
 * made in its 32-bit lane at once (low 7 bits, the next 7 shifted to byte 1, the next to byte 2,
 * the continuation bits from two compares), then the lanes' 1 to 3 bytes moved together by one
 * byte shuffle chosen by which lanes are >= 0x80 and >= 0x4000 (varint_shuffle: 256 masks and
 * lengths, made at module init). put_small's bytes, a third of its time (tests compare both). */
static uint8_t varint_shuffle[256][16], varint_length[256];

static void varint_tables(void) {
    for (int idx = 0; idx < 256; idx++) {
        const int two = idx & 15, three = idx >> 4;
        int k = 0;
        memset(varint_shuffle[idx], 0x80, 16);
        for (int lane = 0; lane < 4; lane++) {
            const int len = 1 + ((two >> lane) & 1) + ((three >> lane) & 1);
            for (int b = 0; b < len; b++) varint_shuffle[idx][k++] = (uint8_t)(lane * 4 + b);
        }
        varint_length[idx] = (uint8_t)k;
    }
}

/* Eight int32 values at p (16 bytes of slack past the end written over), or NULL (nothing
 * written) when one is negative or 2**21 or more: the caller writes those one by one. */
__attribute__((target("ssse3"))) static uint8_t *put8_ssse3(uint8_t *p, const int32_t *x) {
    const __m128i a = _mm_loadu_si128((const __m128i *)x), b = _mm_loadu_si128((const __m128i *)(x + 4));
    const __m128i limit = _mm_set1_epi32(0x200000), minus = _mm_set1_epi32(-1);
    const __m128i in = _mm_and_si128(_mm_and_si128(_mm_cmpgt_epi32(limit, a), _mm_cmpgt_epi32(a, minus)),
                                     _mm_and_si128(_mm_cmpgt_epi32(limit, b), _mm_cmpgt_epi32(b, minus)));
    if (_mm_movemask_epi8(in) != 0xFFFF) return NULL;
    const __m128i v[2] = {a, b};
    for (int h = 0; h < 2; h++) {
        const __m128i x4 = v[h];
        const __m128i two = _mm_cmpgt_epi32(x4, _mm_set1_epi32(0x7F)), three = _mm_cmpgt_epi32(x4, _mm_set1_epi32(0x3FFF));
        __m128i word = _mm_and_si128(x4, _mm_set1_epi32(0x7F));
        word = _mm_or_si128(word, _mm_and_si128(_mm_slli_epi32(x4, 1), _mm_set1_epi32(0x7F00)));
        word = _mm_or_si128(word, _mm_and_si128(_mm_slli_epi32(x4, 2), _mm_set1_epi32(0x7F0000)));
        word = _mm_or_si128(word, _mm_and_si128(two, _mm_set1_epi32(0x80)));
        word = _mm_or_si128(word, _mm_and_si128(three, _mm_set1_epi32(0x8000)));
        const int idx = _mm_movemask_ps(_mm_castsi128_ps(two)) | _mm_movemask_ps(_mm_castsi128_ps(three)) << 4;
        _mm_storeu_si128((__m128i *)p, _mm_shuffle_epi8(word, _mm_loadu_si128((const __m128i *)varint_shuffle[idx])));
        p += varint_length[idx];
    }
    return p;
}

static int simd_varints = 0; /* set at module init when the CPU has SSSE3; use_simd_varints() for tests */

static void varints_choose(void) {
    varint_tables();
    simd_varints = __builtin_cpu_supports("ssse3") != 0;
}
#else
#define HAVE_SIMD_VARINTS 0
static int simd_varints = 0;
static void varints_choose(void) {}
#endif

static uint8_t *put_values(uint8_t *p, const char *row, Py_ssize_t count, Py_ssize_t item) {
    Py_ssize_t i = 0;
    if (item == 4) {
        const int32_t *x = (const int32_t *)row;
        uint32_t any = 0; /* a row of values below 0x80 (a mask, segments): two loops the compiler vectorizes */
        for (Py_ssize_t j = 0; j < count; j++) any |= (uint32_t)x[j];
        if (any < 0x80) {
            for (Py_ssize_t j = 0; j < count; j++) p[j] = (uint8_t)x[j];
            return p + count;
        }
        for (; i + 8 <= count; i += 8) {
            uint32_t any = 0;
            for (int j = 0; j < 8; j++) any |= (uint32_t)x[i + j];
            if (any < 0x80) {
                for (int j = 0; j < 8; j++) p[j] = (uint8_t)x[i + j];
                p += 8;
            } else {
#if HAVE_SIMD_VARINTS
                uint8_t *q = simd_varints ? put8_ssse3(p, x + i) : NULL;
                if (q) {
                    p = q;
                    continue;
                }
#endif
                for (int j = 0; j < 8; j++) p = put_small(p, (uint64_t)(int64_t)x[i + j]);
            }
        }
    }
    for (; i < count; i++) p = put_small(p, int_value(row, i, item));
    return p;
}

/* Record r's integer payloads into `scratch` (each feature's start into w->at, its length into
 * w->payload) and the lengths of its map entries; returns the Features message's length. Writing
 * first and measuring after costs one memcpy of the payloads, where measuring first (a pass over
 * every value to count its varint bytes) cost as much as writing. */
static uint64_t stage_record(WFeature *features, int n_features, Py_ssize_t r, uint8_t *scratch) {
    uint64_t total = 0;
    for (int f = 0; f < n_features; f++) {
        WFeature *w = &features[f];
        w->values_now = (uint64_t)w->count;
        if (w->is_runs) { /* 0 before lo, 1 on [lo, hi), 0 to the width: one byte each (checked by write_args) */
            const int64_t *run = (const int64_t *)w->values + 3 * r;
            w->at = scratch;
            memset(scratch, 0, (size_t)run[0]);
            memset(scratch + run[0], 1, (size_t)(run[1] - run[0]));
            memset(scratch + run[1], 0, (size_t)(run[2] - run[1]));
            scratch += run[2];
            w->values_now = w->payload = (uint64_t)run[2];
        } else if (w->is_float) {
            const char *row = w->values + r * w->count * w->item;
            w->at = (const uint8_t *)row; /* little-endian float32: see module init */
            w->payload = 4 * (uint64_t)w->count;
        } else {
            const char *row = w->values + r * w->count * w->item;
            w->at = scratch;
            scratch = put_values(scratch, row, w->count, w->item);
            w->payload = (uint64_t)(scratch - w->at);
        }
        w->list = w->values_now ? 1 + varint_len(w->payload) + w->payload : 0; /* an empty list is left out */
        w->feature = 1 + varint_len(w->list) + w->list;
        w->entry = (uint64_t)w->prefix_len + varint_len(w->feature) + w->feature;
        total += 1 + varint_len(w->entry) + w->entry;
    }
    return total;
}

/* The scratch bytes stage_record needs for any row: 10 per integer value, and the slack. */
static Py_ssize_t scratch_size(const WFeature *features, int n_features) {
    Py_ssize_t size = SCRATCH_SLACK;
    for (int f = 0; f < n_features; f++)
        if (!features[f].is_float) size += (features[f].is_runs ? 1 : 10) * features[f].count;
    return size;
}

/* The record staged by stage_record (`size` its Features length) at p; returns the end. */
static uint8_t *write_record(uint8_t *p, const WFeature *features, int n_features, uint64_t size) {
    *p++ = 0x0a;
    p = put_varint(p, size);
    for (int f = 0; f < n_features; f++) {
        const WFeature *w = &features[f];
        *p++ = 0x0a;
        p = put_varint(p, w->entry);
        memcpy(p, w->prefix, (size_t)w->prefix_len);
        p += w->prefix_len;
        p = put_varint(p, w->feature);
        *p++ = w->is_float ? 0x12 : 0x1a;
        p = put_varint(p, w->list);
        if (!w->values_now) continue;
        *p++ = 0x0a;
        p = put_varint(p, w->payload);
        memcpy(p, w->at, (size_t)w->payload);
        p += w->payload;
    }
    return p;
}

/* A buffer that holds exactly `count` items of `item` bytes of struct format `code` ('i' int32,
 * 'q' int64, 'd' float64, '?' bool), C-contiguous (writable when asked); 0 and an error if not. */
static int typed_buffer(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t count, Py_ssize_t item, char code,
                        const char *what) {
    if (PyObject_GetBuffer(obj, view, (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return 0;
    const char *fmt = view->format ? view->format : "B";
    if (*fmt == '@' || *fmt == '=' || *fmt == '<') fmt++;
    char got = fmt[0] == 'l' && view->itemsize == 8 ? 'q' : fmt[0] == 'L' && view->itemsize == 8 ? 'Q' : fmt[0];
    if (got != code || fmt[1] != 0 || view->itemsize != item || view->len != count * item) {
        PyErr_Format(PyExc_TypeError, "%s: needs %zd C-contiguous items of format '%c'", what, count, code);
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

/* typed_buffer for objs[0..count) into v (each's count, item size, format code and whether
 * writable): *nv counts the views taken, which the caller releases (release_all), error or not. */
static int typed_buffers(PyObject **objs, Py_buffer *v, int *nv, int count, const Py_ssize_t *counts,
                         const Py_ssize_t *items, const char *codes, const int *writable, const char *what) {
    for (int a = 0; a < count; a++) {
        if (!typed_buffer(objs[a], &v[a], writable[a], counts[a], items[a], codes[a], what)) return 0;
        (*nv)++;
    }
    return 1;
}

/* The item size a buffer's struct format allows for a feature: 4 or 8 for a signed integer
 * (int32, int64), 4 for float32; 0 when it is anything else. */
static Py_ssize_t format_item(const Py_buffer *view, int is_float) {
    const char *fmt = view->format ? view->format : "B";
    if (*fmt == '@' || *fmt == '=' || *fmt == '<') fmt++;
    if (fmt[0] == 0 || fmt[1] != 0) return 0;
    if (is_float) return fmt[0] == 'f' && view->itemsize == 4 ? 4 : 0;
    if ((fmt[0] == 'i' || fmt[0] == 'l' || fmt[0] == 'q') && (view->itemsize == 4 || view->itemsize == 8)) return view->itemsize;
    return 0;
}

/* A runs feature (kind 'r'): int64 rows [lo, hi, width] with 0 <= lo <= hi <= width < 2**31
 * (the row: width values, 1 on [lo, hi), 0 elsewhere); its count becomes the widest row's width. */
static int runs_args(WFeature *w, Py_ssize_t n, Py_ssize_t f) {
    const int64_t *run = (const int64_t *)w->values;
    int64_t widest = 0;
    if (w->item != 8 || w->count != 3) {
        PyErr_Format(PyExc_TypeError, "serialize_examples: runs feature %zd needs int64 rows [lo, hi, width]", f);
        return 0;
    }
    for (Py_ssize_t r = 0; r < n; r++, run += 3) {
        if (run[0] < 0 || run[1] < run[0] || run[2] < run[1] || run[2] > INT32_MAX) {
            PyErr_Format(PyExc_ValueError, "serialize_examples: runs feature %zd, row %zd: needs 0 <= lo <= hi <= width", f, r);
            return 0;
        }
        if (run[2] > widest) widest = run[2];
    }
    w->count = (Py_ssize_t)widest;
    return 1;
}

/* Parses serialize_examples' arguments into `features` (views released by the caller); the row count into *n. */
static int write_args(PyObject *arrays, PyObject *prefixes, PyObject *kinds, WFeature *features, Py_buffer *views,
                      int *n_views, Py_ssize_t *n) {
    if (!PyTuple_Check(arrays) || !PyTuple_Check(prefixes) || !PyBytes_Check(kinds)) {
        PyErr_SetString(PyExc_TypeError, "serialize_examples: arrays and prefixes are tuples, kinds is bytes");
        return 0;
    }
    Py_ssize_t nf = PyTuple_GET_SIZE(arrays);
    if (nf < 1 || nf > MAX_FEATURES || PyTuple_GET_SIZE(prefixes) != nf || PyBytes_GET_SIZE(kinds) != nf) {
        PyErr_SetString(PyExc_ValueError, "serialize_examples: 1 to 64 features, as many prefixes and kinds as arrays");
        return 0;
    }
    for (Py_ssize_t f = 0; f < nf; f++) {
        WFeature *w = &features[f];
        PyObject *prefix = PyTuple_GET_ITEM(prefixes, f);
        char kind = PyBytes_AS_STRING(kinds)[f];
        if (!PyBytes_Check(prefix) || (kind != 'i' && kind != 'f' && kind != 'r')) {
            PyErr_SetString(PyExc_TypeError, "serialize_examples: prefixes are bytes, kinds 'i', 'f' or 'r'");
            return 0;
        }
        w->prefix = (const uint8_t *)PyBytes_AS_STRING(prefix);
        w->prefix_len = PyBytes_GET_SIZE(prefix);
        w->is_float = kind == 'f';
        w->is_runs = kind == 'r';
        Py_buffer *view = &views[*n_views];
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(arrays, f), view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return 0;
        (*n_views)++;
        w->item = format_item(view, w->is_float);
        if (!w->item || view->ndim != 2) {
            PyErr_Format(PyExc_TypeError, "serialize_examples: feature %zd needs a 2-D C-contiguous %s array", f,
                         w->is_float ? "float32" : "int32 or int64");
            return 0;
        }
        if (f == 0) *n = view->shape[0];
        if (view->shape[0] != *n) {
            PyErr_Format(PyExc_ValueError, "serialize_examples: feature %zd has %zd rows, not %zd", f, view->shape[0], *n);
            return 0;
        }
        w->count = view->shape[1];
        w->values = (const char *)view->buf;
        if (w->is_runs && !runs_args(w, *n, f)) return 0;
    }
    return 1;
}

/* serialize_examples(arrays, prefixes, kinds) -> list of bytes: the tf.train.Example of each row,
 * byte for byte bert_data.format.example_wire's numpy encoder. `arrays`: per feature, a 2-D
 * C-contiguous array of n rows (int32 or int64 for kind 'i', float32 for 'f'); `prefixes`: per
 * feature, its map entry's constant bytes (0a, the key's length, the key, 12); `kinds`: bytes,
 * 'i' (Int64List) or 'f' (FloatList) per feature. */
static PyObject *serialize_examples(PyObject *self, PyObject *args) {
    PyObject *arrays, *prefixes, *kinds;
    if (!PyArg_ParseTuple(args, "OOO", &arrays, &prefixes, &kinds)) return NULL;
    WFeature features[MAX_FEATURES];
    Py_buffer views[MAX_FEATURES];
    int n_views = 0;
    Py_ssize_t n = 0;
    PyObject *out = NULL;
    uint8_t *scratch = NULL;
    if (!write_args(arrays, prefixes, kinds, features, views, &n_views, &n)) goto done;
    scratch = (uint8_t *)PyMem_Malloc((size_t)scratch_size(features, n_views));
    if (!scratch) { PyErr_NoMemory(); goto done; }
    out = PyList_New(n);
    if (!out) goto done;
    for (Py_ssize_t r = 0; r < n; r++) {
        const uint64_t size = stage_record(features, n_views, r, scratch);
        const uint64_t length = 1 + varint_len(size) + size;
        PyObject *record = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)length); /* length < 11 bytes a value */
        if (!record) { Py_CLEAR(out); goto done; }
        uint8_t *start = (uint8_t *)PyBytes_AS_STRING(record);
        if (write_record(start, features, n_views, size) != start + length) { /* cannot happen: measured above */
            Py_DECREF(record);
            Py_CLEAR(out);
            PyErr_SetString(PyExc_SystemError, "serialize_examples: a record's length differs from its plan");
            goto done;
        }
        PyList_SET_ITEM(out, r, record);
    }
done:
    PyMem_Free(scratch);
    release_all(views, n_views);
    return out;
}

/* The bytes of one record's frame at most (16 + the record), whatever its values: every integer a
 * 10-byte varint, every float 4 bytes (the lengths stage_record computes, from those payloads). */
static uint64_t frame_bound(const WFeature *features, int n_features) {
    uint64_t total = 0;
    for (int f = 0; f < n_features; f++) {
        const WFeature *w = &features[f];
        const uint64_t payload = (uint64_t)w->count * (w->is_float ? 4 : w->is_runs ? 1 : 10);
        const uint64_t list = w->count ? 1 + varint_len(payload) + payload : 0;
        const uint64_t feature = 1 + varint_len(list) + list;
        const uint64_t entry = (uint64_t)w->prefix_len + varint_len(feature) + feature;
        total += 1 + varint_len(entry) + entry;
    }
    return 16 + 1 + varint_len(total) + total;
}

/* serialize_shard_runs(arrays, prefixes, kinds, shard_of_row, num_shards) -> list: for each shard
 * s in [0, num_shards), the records of serialize_examples of the rows r with shard_of_row[r] == s
 * (int64, one per row), in row order, each in its TFRecord frame as frame_records writes it, in
 * one bytes (b"" for a shard without rows): what a worker writes. One pass a record, no object per
 * record, and the rows read in batch order, each frame written straight into its shard's bytes
 * (reading one shard's rows at a time jumped from row to row: a cold MSL-512 batch took 10.3 ms
 * against 6.9). Kind 'r' takes a row of 0/1 values as its run of ones (runs_args). */
static PyObject *serialize_shard_runs(PyObject *self, PyObject *args) {
    PyObject *arrays, *prefixes, *kinds, *shards_obj;
    Py_ssize_t num_shards;
    if (!PyArg_ParseTuple(args, "OOOOn", &arrays, &prefixes, &kinds, &shards_obj, &num_shards)) return NULL;
    WFeature features[MAX_FEATURES];
    Py_buffer views[MAX_FEATURES], shards_view;
    int n_views = 0, have_shards = 0;
    Py_ssize_t n = 0;
    PyObject *out = NULL;
    uint8_t *scratch = NULL;
    Py_ssize_t *used = NULL;
    if (!write_args(arrays, prefixes, kinds, features, views, &n_views, &n)) goto fail;
    if (num_shards < 1) {
        PyErr_SetString(PyExc_ValueError, "serialize_shard_runs: num_shards must be at least 1");
        goto fail;
    }
    if (!typed_buffer(shards_obj, &shards_view, 0, n, 8, 'q', "serialize_shard_runs: shard_of_row")) goto fail;
    have_shards = 1;
    const int64_t *shard = (const int64_t *)shards_view.buf;
    used = PyMem_Calloc((size_t)num_shards, sizeof(Py_ssize_t)); /* first the rows of each shard */
    if (!used) { PyErr_NoMemory(); goto fail; }
    for (Py_ssize_t r = 0; r < n; r++) {
        if (shard[r] < 0 || shard[r] >= num_shards) {
            PyErr_Format(PyExc_IndexError, "serialize_shard_runs: shard %lld of %zd", (long long)shard[r], num_shards);
            goto fail;
        }
        used[shard[r]]++;
    }
    scratch = (uint8_t *)PyMem_Malloc((size_t)scratch_size(features, n_views));
    if (!scratch) { PyErr_NoMemory(); goto fail; }
    /* Each shard's bytes: its rows times the first record's frame and a quarter more (a bound on
     * every record, ~6x that at MSL 512, made 60 MB a batch that malloc handed back to the kernel
     * and took again, zeroed, page by page), grown when a shard's records are longer. */
    const uint64_t bound = frame_bound(features, n_views);
    const uint64_t size0 = n ? stage_record(features, n_views, 0, scratch) : 0;
    const uint64_t first = 16 + 1 + varint_len(size0) + size0;
    const uint64_t guess = first + first / 4 + 64 < bound ? first + first / 4 + 64 : bound;
    out = PyList_New(num_shards);
    if (!out) goto fail;
    for (Py_ssize_t s = 0; s < num_shards; s++) {
        if ((uint64_t)used[s] > (uint64_t)(PY_SSIZE_T_MAX / 2) / bound) { PyErr_NoMemory(); goto fail; }
        PyObject *run = PyBytes_FromStringAndSize(NULL, used[s] * (Py_ssize_t)guess);
        if (!run) goto fail;
        PyList_SET_ITEM(out, s, run);
        used[s] = 0; /* from here, the bytes written */
    }
    for (Py_ssize_t r = 0; r < n; r++) {
        const uint64_t size = stage_record(features, n_views, r, scratch);
        const uint64_t length = 1 + varint_len(size) + size;
        const Py_ssize_t s = (Py_ssize_t)shard[r], need = used[s] + 16 + (Py_ssize_t)length;
        PyObject *run = PyList_GET_ITEM(out, s);
        if (need > PyBytes_GET_SIZE(run)) { /* longer records than the first: twice the room */
            PyList_SET_ITEM(out, s, NULL);
            if (_PyBytes_Resize(&run, 2 * PyBytes_GET_SIZE(run) > need ? 2 * PyBytes_GET_SIZE(run) : need) < 0) goto fail;
            PyList_SET_ITEM(out, s, run);
        }
        uint8_t *p = (uint8_t *)PyBytes_AS_STRING(run) + used[s];
        uint32_t crc;
        memcpy(p, &length, 8); /* little-endian: see module init */
        crc = masked(crc32c(p, 8));
        memcpy(p + 8, &crc, 4);
        if (write_record(p + 12, features, n_views, size) != p + 12 + length) { /* cannot happen: measured above */
            PyErr_SetString(PyExc_SystemError, "serialize_shard_runs: a record's length differs from its plan");
            goto fail;
        }
        crc = masked(crc32c(p + 12, (size_t)length));
        memcpy(p + 12 + length, &crc, 4);
        used[s] = need;
    }
    for (Py_ssize_t s = 0; s < num_shards; s++) {
        PyObject *run = PyList_GET_ITEM(out, s);
        if (PyBytes_GET_SIZE(run) != used[s]) {
            PyList_SET_ITEM(out, s, NULL);
            if (_PyBytes_Resize(&run, used[s]) < 0) goto fail; /* (run freed, its slot empty) */
            PyList_SET_ITEM(out, s, run);
        }
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    PyMem_Free(scratch);
    PyMem_Free(used);
    if (have_shards) PyBuffer_Release(&shards_view);
    release_all(views, n_views);
    return out;
}

/* frame_records(payloads) -> bytes: TFRecord frames of a sequence of bytes-like payloads (uint64 LE
 * length, masked CRC32C of those 8 bytes, the payload, masked CRC32C of the payload), as
 * bert_data.format.tfrecord.frame_records writes them. */
static PyObject *frame_records(PyObject *self, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "frame_records: payloads must be a sequence");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), total = 0;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = NULL;
    for (Py_ssize_t i = 0; i < n; i++) { /* the size: bytes directly, anything else through its buffer */
        Py_ssize_t len;
        if (PyBytes_Check(items[i])) len = PyBytes_GET_SIZE(items[i]);
        else {
            Py_buffer view;
            if (!get_buffer(items[i], &view, 0, 0, "payload")) goto done;
            len = view.len;
            PyBuffer_Release(&view);
        }
        if (len > PY_SSIZE_T_MAX - 16 - total) { PyErr_NoMemory(); goto done; }
        total += 16 + len;
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (!out) goto done;
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(out), *end = p + total;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_buffer view;
        if (!get_buffer(items[i], &view, 0, 0, "payload")) { Py_CLEAR(out); goto done; }
        const uint64_t len = (uint64_t)view.len;
        if ((uint64_t)(end - p) < 16 || len > (uint64_t)(end - p) - 16) { /* a payload that grew since it was measured */
            PyBuffer_Release(&view);
            Py_CLEAR(out);
            PyErr_SetString(PyExc_RuntimeError, "frame_records: a payload changed size while being framed");
            goto done;
        }
        uint32_t crc;
        memcpy(p, &len, 8); /* little-endian: see module init */
        crc = masked(crc32c(p, 8));
        memcpy(p + 8, &crc, 4);
        memcpy(p + 12, view.buf, (size_t)len);
        crc = masked(crc32c(p + 12, (size_t)len));
        memcpy(p + 12 + len, &crc, 4);
        p += 16 + len;
        PyBuffer_Release(&view);
    }
    if (p != end) { /* a payload that shrank */
        Py_CLEAR(out);
        PyErr_SetString(PyExc_RuntimeError, "frame_records: a payload changed size while being framed");
    }
done:
    Py_DECREF(seq);
    return out;
}

/* ---------------------------------------------------------------- a pass's rows: assembly and masking */

/* The buffers of an assembling function's arrays into v (released by the caller, *nv of them):
 * objs[0] a flat int32 token array of any length (its size into *size), then objs[1..count) of
 * the given counts, item sizes and formats, writable from `first_out` on. 0 and an error if not. */
static int row_buffers(PyObject **objs, Py_buffer *v, int *nv, int count, Py_ssize_t *counts, const Py_ssize_t *items,
                       const char *codes, int first_out, Py_ssize_t *size, const char *what) {
    if (PyObject_GetBuffer(objs[0], &v[0], PyBUF_C_CONTIGUOUS) < 0) return 0;
    *size = counts[0] = v[0].len / 4; /* its format is checked below */
    PyBuffer_Release(&v[0]);
    for (int a = 0; a < count; a++) {
        if (!typed_buffer(objs[a], &v[a], a >= first_out, counts[a], items[a], codes[a], what)) return 0;
        (*nv)++;
    }
    return 1;
}

static inline void fill_int32(int32_t *p, int32_t value, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) p[i] = value;
}

/* assemble_pairs(ids, a_lo, a_hi, b_lo, b_hi, cls, sep, input_ids, input_mask, segment_ids,
 * candidates, real_length) -> bool: bert_data.instances.assemble's arrays, row by row:
 * [CLS] A [SEP] B [SEP] and 0-padding from the pass's token space `ids` (int32) and the plan's
 * token ranges (int64, n each), into int32 (n, L) input_ids, input_mask, segment_ids, bool
 * (n, L) candidates and int64 (n) real_length. False (the outputs unspecified) when a row is not
 * a valid plan (a range outside `ids` or reversed, or longer than L - 3 together): the caller
 * runs numpy, which says what is wrong. input_mask and segment_ids None: the masks are not made
 * (bert_data.format.row_runs.MaskRuns: the caller keeps their runs). */
static PyObject *assemble_pairs(PyObject *self, PyObject *args) {
    PyObject *objs[12];
    long long cls, sep;
    Py_ssize_t n, L;
    if (!PyArg_ParseTuple(args, "nnOOOOOLLOOOOO", &n, &L, &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &cls, &sep,
                          &objs[5], &objs[6], &objs[7], &objs[8], &objs[9]))
        return NULL;
    if (n < 0 || L < 3) { PyErr_SetString(PyExc_ValueError, "assemble_pairs: n >= 0 rows of L >= 3"); return NULL; }
    const int masks = objs[6] != Py_None; /* None for both: the masks not made (their runs are the caller's) */
    if (masks != (objs[7] != Py_None)) {
        PyErr_SetString(PyExc_TypeError, "assemble_pairs: input_mask and segment_ids are both arrays or both None");
        return NULL;
    }
    if (!masks) objs[6] = objs[7] = objs[5]; /* checked as input_ids is, never written */
    Py_buffer v[10];
    int nv = 0;
    PyObject *result = NULL;
    Py_ssize_t size, counts[10] = {0, n, n, n, n, n * L, n * L, n * L, n * L, n};
    const Py_ssize_t items[10] = {4, 8, 8, 8, 8, 4, 4, 4, 1, 8};
    if (!row_buffers(objs, v, &nv, 10, counts, items, "iqqqqiii?q", 5, &size, "assemble_pairs")) goto done;
    const int32_t *ids = v[0].buf;
    const int64_t *a_lo = v[1].buf, *a_hi = v[2].buf, *b_lo = v[3].buf, *b_hi = v[4].buf;
    int32_t *out_ids = v[5].buf, *out_mask = v[6].buf, *out_seg = v[7].buf;
    uint8_t *out_cand = v[8].buf;
    int64_t *out_real = v[9].buf;
    int ok = 1;
    for (Py_ssize_t r = 0; r < n && ok; r++) {
        const int64_t la = a_hi[r] - a_lo[r], lb = b_hi[r] - b_lo[r];
        if (a_lo[r] < 0 || la < 0 || a_hi[r] > size || b_lo[r] < 0 || lb < 0 || b_hi[r] > size || la + lb > L - 3) {
            ok = 0;
            break;
        }
        const Py_ssize_t real = (Py_ssize_t)(la + lb + 3), off = r * L;
        int32_t *row = out_ids + off;
        row[0] = (int32_t)cls;
        memcpy(row + 1, ids + a_lo[r], (size_t)la * 4);
        row[1 + la] = (int32_t)sep;
        memcpy(row + 2 + la, ids + b_lo[r], (size_t)lb * 4);
        row[real - 1] = (int32_t)sep;
        memset(row + real, 0, (size_t)(L - real) * 4);
        /* runs, not a comparison a position: mask 1 on [0, real); segment 1 on B and its [SEP],
         * [la + 2, real); candidates A [1, la] and B [la + 2, real - 1) */
        uint8_t *cand = out_cand + off;
        if (masks) {
            int32_t *mask = out_mask + off, *seg = out_seg + off;
            fill_int32(mask, 1, real);
            memset(mask + real, 0, (size_t)(L - real) * 4);
            memset(seg, 0, (size_t)(la + 2) * 4);
            fill_int32(seg + la + 2, 1, real - (la + 2));
            memset(seg + real, 0, (size_t)(L - real) * 4);
        }
        cand[0] = 0;
        memset(cand + 1, 1, (size_t)la);
        cand[la + 1] = 0;
        memset(cand + la + 2, 1, (size_t)lb);
        memset(cand + real - 1, 0, (size_t)(L - real + 1));
        out_real[r] = real;
    }
    result = PyBool_FromLong(ok);
done:
    release_all(v, nv);
    return result;
}

/* assemble_windows(n, L, tokens, starts, lengths, cls, sep, separator, has_separator, input_ids,
 * input_mask, candidates, real_length) -> bool: bert_data.windows.assemble_windows' arrays:
 * [CLS] window [SEP] and 0-padding from `tokens` (int32) and the windows' starts and lengths
 * (int64, n each), into int32 (n, L) input_ids and input_mask, bool (n, L) candidates (the
 * window's tokens other than [CLS], [SEP] and, with has_separator, the document separator) and
 * int64 (n) real_length. False when a window is outside `tokens` or longer than L - 2: the
 * caller runs numpy. input_mask None: the mask is not made (the caller keeps its runs). */
static PyObject *assemble_windows(PyObject *self, PyObject *args) {
    PyObject *objs[7];
    long long cls, sep, separator;
    int has_separator;
    Py_ssize_t n, L;
    if (!PyArg_ParseTuple(args, "nnOOOLLLpOOOO", &n, &L, &objs[0], &objs[1], &objs[2], &cls, &sep, &separator,
                          &has_separator, &objs[3], &objs[4], &objs[5], &objs[6]))
        return NULL;
    if (n < 0 || L < 2) { PyErr_SetString(PyExc_ValueError, "assemble_windows: n >= 0 rows of L >= 2"); return NULL; }
    const int masks = objs[4] != Py_None; /* None: the mask not made (its runs are the caller's) */
    if (!masks) objs[4] = objs[3]; /* checked as input_ids is, never written */
    Py_buffer v[7];
    int nv = 0;
    PyObject *result = NULL;
    Py_ssize_t size, counts[7] = {0, n, n, n * L, n * L, n * L, n};
    const Py_ssize_t items[7] = {4, 8, 8, 4, 4, 1, 8};
    if (!row_buffers(objs, v, &nv, 7, counts, items, "iqqii?q", 3, &size, "assemble_windows")) goto done;
    const int32_t *tokens = v[0].buf;
    const int64_t *starts = v[1].buf, *lengths = v[2].buf;
    int32_t *out_ids = v[3].buf, *out_mask = v[4].buf;
    uint8_t *out_cand = v[5].buf;
    int64_t *out_real = v[6].buf;
    int ok = 1;
    for (Py_ssize_t r = 0; r < n; r++) {
        const int64_t lo = starts[r], span = lengths[r];
        if (lo < 0 || span < 0 || span > L - 2 || lo > size - span) { ok = 0; break; }
        const Py_ssize_t real = (Py_ssize_t)span + 2, off = r * L;
        int32_t *row = out_ids + off;
        row[0] = (int32_t)cls;
        memcpy(row + 1, tokens + lo, (size_t)span * 4);
        row[real - 1] = (int32_t)sep;
        memset(row + real, 0, (size_t)(L - real) * 4);
        uint8_t *cand = out_cand + off;
        if (masks) {
            int32_t *mask = out_mask + off;
            fill_int32(mask, 1, real);
            memset(mask + real, 0, (size_t)(L - real) * 4);
        }
        cand[0] = 0;
        for (Py_ssize_t j = 1; j <= span; j++) {
            const int32_t id = row[j];
            cand[j] = id != cls && id != sep && !(has_separator && id == separator);
        }
        memset(cand + span + 1, 0, (size_t)(L - span - 1));
        out_real[r] = real;
    }
    result = PyBool_FromLong(ok);
done:
    release_all(v, nv);
    return result;
}

/* numpy's bitgen_t (numpy/random/bitgen.h: "Must match the declaration in numpy/random/<any>.pxd",
 * unchanged since numpy 1.17): what a BitGenerator's `capsule` (named "BitGenerator") points to.
 * Generator.random(size) fills out[i] = next_double(state) in C order (numpy's
 * random_standard_uniform_fill), so calling next_double here, row by row, draws the very keys
 * rng.random((n, L)) would, and leaves the generator where it would. */
typedef struct {
    void *state;
    uint64_t (*next_uint64)(void *st);
    uint32_t (*next_uint32)(void *st);
    double (*next_double)(void *st);
    uint64_t (*next_raw)(void *st);
} BitGen;

/* The k-th smallest (0-based) of a[0..n), n > k, reordering a (Hoare's selection). */
static double kth_smallest(double *a, Py_ssize_t n, Py_ssize_t k) {
    Py_ssize_t lo = 0, hi = n - 1;
    while (hi > lo) {
        const double x = a[lo + (hi - lo) / 2];
        Py_ssize_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] < x) i++;
            while (a[j] > x) j--;
            if (i <= j) {
                const double s = a[i];
                a[i++] = a[j];
                a[j--] = s;
            }
        }
        if (k <= j) hi = j;
        else if (k >= i) lo = i;
        else return x; /* between the two parts: equal to the pivot */
    }
    return a[k];
}

#ifdef __SIZEOF_INT128__
#define HAVE_PCG64 1
/* numpy's PCG64 (numpy/random/src/pcg64: the 128-bit LCG of multiplier PCG_DEFAULT_MULTIPLIER_128
 * and odd increment `inc`, stepped before each output, XSL-RR output; next_double takes its top 53
 * bits; tests/test_native_masking.py holds it to numpy's own draws and state): inline, the keys
 * past a row's last candidate (its padding) are skipped by a jump instead of drawn one by one. */
typedef unsigned __int128 U128;
#define PCG64_MULT (((U128)2549297995355413924ULL << 64) | 4865540595714422341ULL)

/* The output of a stepped state (XSL-RR), and its double (the top 53 bits) */
static inline uint64_t pcg64_out64(U128 state) {
    const uint64_t x = (uint64_t)(state >> 64) ^ (uint64_t)state;
    const unsigned rot = (unsigned)(state >> 122);
    return (x >> rot) | (x << ((64 - rot) & 63));
}

static inline double pcg64_out(U128 state) { return (double)(pcg64_out64(state) >> 11) * (1.0 / 9007199254740992.0); }

static inline double pcg64_double(U128 *state, U128 inc) {
    *state = *state * PCG64_MULT + inc;
    return pcg64_out(*state);
}

/* Four steps at once: x -> a4 x + c4 is four steps of the LCG (a4 = M^4, c4 = inc (M^3 + M^2 + M + 1)). */
typedef struct { U128 a4, c4; } PCG64Jump4;

static PCG64Jump4 pcg64_jump4(U128 inc) {
    const U128 m = PCG64_MULT, m2 = m * m;
    PCG64Jump4 j = {m2 * m2, inc * (m2 * m + m2 + m + 1)};
    return j;
}

/* n draws of pcg64_double into out, and *state stepped n times, as n calls of it: four lanes (draws
 * 4i, 4i+1, 4i+2, 4i+3) each stepped four at a time, so the lanes' 128-bit multiplications overlap
 * where one chain waits on each (the same values: tests/test_native_masking.py). */
static void pcg64_fill(U128 *state, U128 inc, PCG64Jump4 jump, double *out, Py_ssize_t n) {
    U128 s = *state;
    Py_ssize_t j = 0;
    if (n >= 8) {
        U128 x0 = s * PCG64_MULT + inc, x1 = x0 * PCG64_MULT + inc, x2 = x1 * PCG64_MULT + inc,
             x3 = x2 * PCG64_MULT + inc;
        for (; j + 4 <= n; j += 4) {
            out[j] = pcg64_out(x0);
            out[j + 1] = pcg64_out(x1);
            out[j + 2] = pcg64_out(x2);
            out[j + 3] = pcg64_out(x3);
            s = x3;
            x0 = x0 * jump.a4 + jump.c4;
            x1 = x1 * jump.a4 + jump.c4;
            x2 = x2 * jump.a4 + jump.c4;
            x3 = x3 * jump.a4 + jump.c4;
        }
    }
    for (; j < n; j++) out[j] = pcg64_double(&s, inc);
    *state = s;
}

/* The state `delta` steps on (numpy's pcg_advance_lcg_128: PCG64.advance). */
static U128 pcg64_advance(U128 state, U128 inc, uint64_t delta) {
    U128 mult = PCG64_MULT, plus = inc, acc_mult = 1, acc_plus = 0;
    for (; delta; delta >>= 1) {
        if (delta & 1) {
            acc_mult *= mult;
            acc_plus = acc_plus * mult + plus;
        }
        plus = (mult + 1) * plus;
        mult *= mult;
    }
    return acc_mult * state + acc_plus;
}
#else
#define HAVE_PCG64 0
#endif

/* Scratch of choose_row: L doubles each (row: the drawn keys), L int32s each. */
typedef struct { double *row, *gathered, *bucket; int32_t *at, *taken; } ChooseScratch;

enum { CHOOSE_BUCKETS = 64 };

/* The bucket of key x among CHOOSE_BUCKETS equal parts of [0, hi) (scale = CHOOSE_BUCKETS / hi):
 * non-decreasing in x, clamped to the first and last bucket (any double, NaN too, is safe). */
static inline int bucket_of(double x, double scale) {
    const double f = x * scale;
    return f < (double)CHOOSE_BUCKETS ? (f >= 1.0 ? (int)f : 0) : CHOOSE_BUCKETS - 1;
}

/* The smallest keys' threshold of choose_row: the k smallest of m keys uniform in [0, 1) are almost
 * always below t = (k + 3 sqrt(k) + 3) / m (a few dozen keys are). */
static inline double choose_threshold(Py_ssize_t k, Py_ssize_t m) {
    return ((double)k + 3.0 * sqrt((double)k) + 3.0) / (double)m;
}

/* Candidates among a row's first L positions; *k_row lowered to their count. */
static inline Py_ssize_t choose_count(const uint8_t *cand, Py_ssize_t L, int64_t *k_row) {
    Py_ssize_t m = 0;
    for (Py_ssize_t j = 0; j < L; j++) m += cand[j] != 0;
    if (*k_row > m) *k_row = m;
    return m;
}

/* The k smallest of the c >= k keys gathered (s->gathered, their positions s->at, in position
 * order: every candidate's key below t), their positions ascending into pos[0..k); 0 when the
 * k-th and the (k+1)-th smallest are equal. The k-th smallest is found by a histogram of
 * CHOOSE_BUCKETS equal parts of [0, t): the bucket where the count reaches k, then the few keys in
 * it. Every key below t is gathered, so every key equal to the k-th is: more than k gathered keys
 * up to the k-th is a tie. */
static int choose_pick(ChooseScratch *s, Py_ssize_t c, Py_ssize_t k, double t, int32_t *pos) {
    const double scale = (double)CHOOSE_BUCKETS / (t < 1.0 ? t : 1.0);
    Py_ssize_t hist[CHOOSE_BUCKETS] = {0}, below = 0, in = 0;
    for (Py_ssize_t i = 0; i < c; i++) hist[bucket_of(s->gathered[i], scale)]++;
    int b = 0;
    while (below + hist[b] < k) below += hist[b++]; /* ends: the counts add up to c >= k */
    for (Py_ssize_t i = 0; i < c; i++) { /* the keys of bucket b */
        s->bucket[in] = s->gathered[i];
        in += bucket_of(s->gathered[i], scale) == b;
    }
    const double kth = kth_smallest(s->bucket, in, k - below - 1);
    Py_ssize_t taken = 0;
    for (Py_ssize_t i = 0; i < c; i++) { /* gathered in position order: the chosen ascending */
        s->taken[taken] = s->at[i];
        taken += s->gathered[i] <= kth;
    }
    if (taken != k) return 0; /* a (k+1)-th key equal to the k-th */
    memcpy(pos, s->taken, (size_t)k * sizeof(int32_t));
    return 1;
}

/* The *k candidates of one row with the smallest keys, their positions ascending into pos[0..*k),
 * *k first lowered to the row's count of candidates; 0 when the k-th and the (k+1)-th smallest
 * are equal (numpy's choice among them is its own). The keys below choose_threshold are gathered
 * with their positions, without a branch (every candidate only when fewer than k were below t:
 * still exact), then choose_pick. */
static int choose_row(const double *keys, const uint8_t *cand, Py_ssize_t L, int64_t *k_row, ChooseScratch *s,
                      int32_t *pos) {
    const Py_ssize_t m = choose_count(cand, L, k_row);
    const Py_ssize_t k = (Py_ssize_t)*k_row;
    if (k == 0) return 1;
    double t = choose_threshold(k, m);
    Py_ssize_t c;
    for (;;) {
        c = 0;
        for (Py_ssize_t j = 0; j < L; j++) {
            s->gathered[c] = keys[j];
            s->at[c] = (int32_t)j;
            c += (cand[j] != 0) & (keys[j] < t);
        }
        if (c >= k) break;
        t = INFINITY; /* fewer than k below t: every candidate */
    }
    return choose_pick(s, c, k, t, pos);
}

#if HAVE_PCG64
/* pcg64_fill's n draws (the same lanes, the same values, *state stepped n times) gathered as
 * choose_row gathers them below t, without storing the others: one pass where drawing then
 * gathering took two over the row. Returns the count gathered. */
static Py_ssize_t pcg64_gather(U128 *state, U128 inc, PCG64Jump4 jump, const uint8_t *cand, Py_ssize_t n, double t,
                               double *gathered, int32_t *at) {
    U128 s = *state;
    Py_ssize_t j = 0, c = 0;
#define GATHER(x, jj)                                    \
    do {                                                 \
        const double key = pcg64_out(x);                 \
        gathered[c] = key;                               \
        at[c] = (int32_t)(jj);                           \
        c += (cand[jj] != 0) & (key < t);                \
    } while (0)
    if (n >= 8) {
        U128 x0 = s * PCG64_MULT + inc, x1 = x0 * PCG64_MULT + inc, x2 = x1 * PCG64_MULT + inc,
             x3 = x2 * PCG64_MULT + inc;
        for (; j + 4 <= n; j += 4) {
            GATHER(x0, j);
            GATHER(x1, j + 1);
            GATHER(x2, j + 2);
            GATHER(x3, j + 3);
            s = x3;
            x0 = x0 * jump.a4 + jump.c4;
            x1 = x1 * jump.a4 + jump.c4;
            x2 = x2 * jump.a4 + jump.c4;
            x3 = x3 * jump.a4 + jump.c4;
        }
    }
    for (; j < n; j++) {
        s = s * PCG64_MULT + inc;
        GATHER(s, j);
    }
#undef GATHER
    *state = s;
    return c;
}

/* choose_row on the next L keys of a PCG64 (state, inc), drawn as it gathers them; *state
 * stepped L times. Past the row's last candidate (its padding) the keys are skipped by a jump. */
static int choose_row_pcg64(U128 *state, U128 inc, PCG64Jump4 jump, const uint8_t *cand, Py_ssize_t L,
                            int64_t *k_row, ChooseScratch *s, int32_t *pos) {
    Py_ssize_t drawn = L;
    while (drawn > 0 && !cand[drawn - 1]) drawn--;
    const Py_ssize_t m = choose_count(cand, drawn, k_row);
    const Py_ssize_t k = (Py_ssize_t)*k_row;
    if (k == 0) { /* no candidate: nothing drawn is looked at */
        *state = pcg64_advance(*state, inc, (uint64_t)L);
        return 1;
    }
    const U128 start = *state;
    const double t = choose_threshold(k, m);
    int ok;
    const Py_ssize_t c = pcg64_gather(state, inc, jump, cand, drawn, t, s->gathered, s->at);
    if (c >= k) {
        ok = choose_pick(s, c, k, t, pos);
    } else { /* fewer than k below t (rare): the row's keys drawn again, every candidate */
        U128 again = start;
        pcg64_fill(&again, inc, jump, s->row, drawn);
        ok = choose_row(s->row, cand, drawn, k_row, s, pos);
    }
    if (drawn < L) *state = pcg64_advance(*state, inc, (uint64_t)(L - drawn));
    return ok;
}
#endif

/* Masking's sizes as its loops index them: positions are int32 (L, p < 2**31), and the (n, L) and
 * (n, p) arrays of 8-byte items have byte counts that do not overflow (sizes that wrap to small
 * products would pass the buffer checks and be written far past them). n >= 0, L >= 1, p >= 0. */
static int masking_sizes_fit(Py_ssize_t n, Py_ssize_t L, Py_ssize_t p) {
    if (L > INT32_MAX || p > INT32_MAX) return 0;
    const Py_ssize_t widest = L > p ? L : p;
    return n == 0 || n <= PY_SSIZE_T_MAX / 8 / widest;
}

/* choose_rows(n, L, width, p, candidates, k, source, positions) -> bool: the choice of
 * bert_data.masking.mask_batch: per row the k[r] candidates (bool (n, L)) of smallest key,
 * positions ascending into int32 (n, p) `positions`, 0 past k[r]. `k` (int64 (n), each in [0, p])
 * holds the numbers to predict, each lowered in place to its row's count of candidates (so <= width).
 * `source` is one of
 *   - the keys, float64 (n, L), in [0, 1);
 *   - a numpy BitGenerator's capsule: the keys are its next_double() draws, all n L of them in C
 *     order (those of positions that are not candidates too), exactly rng.random((n, L))'s; the
 *     caller holds the BitGenerator's lock;
 *   - (where the module's PCG64 is 1) a numpy PCG64's state, uint64 [state >> 64, state mod 2**64,
 *     inc >> 64, inc mod 2**64]: the same draws made inline, its first two words advanced in place
 *     by n L steps (the caller sets them back into the PCG64).
 * False when a row has a tie at its k-th key (the generator then left part way: the caller puts
 * its state back, and runs numpy). Releases the GIL while it works. */
static PyObject *choose_rows(PyObject *self, PyObject *args) {
    Py_ssize_t n, L, width, p;
    PyObject *objs[4], *source;
    if (!PyArg_ParseTuple(args, "nnnnOOOO", &n, &L, &width, &p, &objs[0], &objs[1], &source, &objs[2])) return NULL;
    if (n < 0 || L < 1 || width < 0 || p < width || width > L || !masking_sizes_fit(n, L, p)) {
        PyErr_SetString(PyExc_ValueError, "choose_rows: sizes must satisfy 0 <= width <= p, width <= L < 2**31, p < 2**31, n L and n p arrays that fit in memory");
        return NULL;
    }
    const Py_ssize_t counts[3] = {n * L, n, n * p}, items[3] = {1, 8, 4};
    const char codes[3] = {'?', 'q', 'i'};
    const int writable[3] = {0, 1, 1};
    Py_buffer v[4];
    int nv = 0;
    PyObject *result = NULL;
    ChooseScratch s = {NULL, NULL, NULL, NULL, NULL};
    const BitGen *gen = NULL;
    uint64_t *pcg = NULL;
    if (!typed_buffers(objs, v, &nv, 3, counts, items, codes, writable, "choose_rows")) goto done;
    if (PyCapsule_CheckExact(source)) {
        gen = PyCapsule_GetPointer(source, "BitGenerator");
        if (!gen) goto done;
    } else {
        if (PyObject_GetBuffer(source, &v[3], PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
        const char *fmt = v[3].format ? v[3].format : "B";
        const int words = HAVE_PCG64 && (fmt[0] == 'Q' || fmt[0] == 'L') && v[3].itemsize == 8;
        PyBuffer_Release(&v[3]);
        if (!typed_buffer(source, &v[3], words, words ? 4 : n * L, 8, words ? 'Q' : 'd', "choose_rows")) goto done;
        nv++;
        if (words) pcg = v[3].buf;
    }
    const uint8_t *cand = v[0].buf;
    int64_t *k = v[1].buf;
    int32_t *positions = v[2].buf;
    for (Py_ssize_t r = 0; r < n; r++) {
        if (k[r] < 0 || k[r] > p) {
            PyErr_SetString(PyExc_ValueError, "choose_rows: every k must be in [0, p]");
            goto done;
        }
    }
    s.row = PyMem_Malloc((size_t)L * sizeof(double));
    s.gathered = PyMem_Malloc((size_t)L * sizeof(double));
    s.bucket = PyMem_Malloc((size_t)L * sizeof(double));
    s.at = PyMem_Malloc((size_t)L * sizeof(int32_t));
    s.taken = PyMem_Malloc((size_t)L * sizeof(int32_t));
    if (!s.row || !s.gathered || !s.bucket || !s.at || !s.taken) { PyErr_NoMemory(); goto done; }
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    memset(positions, 0, (size_t)(n * p) * 4);
#if HAVE_PCG64
    U128 state = pcg ? (U128)pcg[0] << 64 | pcg[1] : 0;
    const U128 inc = pcg ? (U128)pcg[2] << 64 | pcg[3] : 0;
    const PCG64Jump4 jump = pcg64_jump4(inc);
#endif
    for (Py_ssize_t r = 0; r < n && ok; r++) {
        const double *keys = gen || pcg ? s.row : (const double *)v[3].buf + r * L;
        if (gen) {
            double (*next_double)(void *) = gen->next_double;
            void *st = gen->state;
            for (Py_ssize_t j = 0; j < L; j++) s.row[j] = next_double(st);
        }
#if HAVE_PCG64
        else if (pcg) {
            ok = choose_row_pcg64(&state, inc, jump, cand + r * L, L, k + r, &s, positions + r * p);
            continue;
        }
#endif
        ok = choose_row(keys, cand + r * L, L, k + r, &s, positions + r * p);
    }
#if HAVE_PCG64
    if (pcg) {
        pcg[0] = (uint64_t)(state >> 64);
        pcg[1] = (uint64_t)state;
    }
#endif
    Py_END_ALLOW_THREADS
    result = PyBool_FromLong(ok);
done:
    PyMem_Free(s.row);
    PyMem_Free(s.gathered);
    PyMem_Free(s.bucket);
    PyMem_Free(s.at);
    PyMem_Free(s.taken);
    release_all(v, nv);
    return result;
}

/* Every row's k in [0, width] and its first k positions in [0, L): what replace_rows writes at; else
 * 0 and a ValueError. */
static int chosen_in_rows(Py_ssize_t n, Py_ssize_t L, Py_ssize_t width, Py_ssize_t p, const int64_t *k,
                          const int32_t *positions, const char *what) {
    for (Py_ssize_t r = 0; r < n; r++) {
        int bad = k[r] < 0 || k[r] > width;
        for (Py_ssize_t s = 0; s < k[r] && !bad; s++) bad = positions[r * p + s] < 0 || positions[r * p + s] >= L;
        if (bad) {
            PyErr_Format(PyExc_ValueError, "%s: every k must be in [0, width], its positions in [0, L)", what);
            return 0;
        }
    }
    return 1;
}

/* replace_rows(n, L, width, p, mask_id, input_ids, k, coin, random_ids, positions, original, weights):
 * bert_data.masking.mask_batch's 80/10/10 replacements at choose_rows' positions (int32 (n, p)):
 * slot s of row r becomes [MASK] when coin[r, s] < 0.8, stays when < 0.9, else random_ids[r, s]
 * (coin float64, random_ids int64, (n, width)). input_ids (int32 (n, L)) is changed in place;
 * original (int32) and weights (float32, 1.0 per prediction) are (n, p), 0 past each row's k. */
static PyObject *replace_rows(PyObject *self, PyObject *args) {
    Py_ssize_t n, L, width, p;
    long long mask_id;
    PyObject *objs[7];
    if (!PyArg_ParseTuple(args, "nnnnLOOOOOOO", &n, &L, &width, &p, &mask_id, &objs[0], &objs[1], &objs[2], &objs[3],
                          &objs[4], &objs[5], &objs[6]))
        return NULL;
    if (n < 0 || L < 1 || width < 0 || p < width || width > L || !masking_sizes_fit(n, L, p)) {
        PyErr_SetString(PyExc_ValueError, "replace_rows: sizes must satisfy 0 <= width <= p, width <= L < 2**31, p < 2**31, n L and n p arrays that fit in memory");
        return NULL;
    }
    const Py_ssize_t counts[7] = {n * L, n, n * width, n * width, n * p, n * p, n * p};
    const Py_ssize_t items[7] = {4, 8, 8, 8, 4, 4, 4};
    const char codes[7] = {'i', 'q', 'd', 'q', 'i', 'i', 'f'};
    const int writable[7] = {1, 0, 0, 0, 0, 1, 1};
    Py_buffer v[7];
    int nv = 0;
    PyObject *result = NULL;
    if (!typed_buffers(objs, v, &nv, 7, counts, items, codes, writable, "replace_rows")) goto done;
    int32_t *ids = v[0].buf, *original = v[5].buf;
    const int64_t *k = v[1].buf, *random_ids = v[3].buf;
    const double *coin = v[2].buf;
    const int32_t *positions = v[4].buf;
    float *weights = v[6].buf;
    if (!chosen_in_rows(n, L, width, p, k, positions, "replace_rows")) goto done;
    memset(original, 0, (size_t)(n * p) * 4);
    memset(weights, 0, (size_t)(n * p) * 4);
    for (Py_ssize_t r = 0; r < n; r++) {
        int32_t *row = ids + r * L;
        for (Py_ssize_t s = 0; s < k[r]; s++) {
            const Py_ssize_t at = r * p + s, slot = r * width + s;
            const int32_t was = row[positions[at]];
            const double c = coin[slot];
            original[at] = was;
            weights[at] = 1.0f;
            row[positions[at]] = c < 0.8 ? (int32_t)mask_id : (c < 0.9 ? was : (int32_t)random_ids[slot]);
        }
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    release_all(v, nv);
    return result;
}

/* numpy's buffered_bounded_lemire_uint32 (Generator.integers(0, rng + 1) of a range under
 * 2**32 - 1, rng > 0): Lemire's multiply, a draw rejected while its low half is below the
 * threshold; `next` draws 32 bits from `state` (inlined where it is a known function). */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline uint32_t lemire32(uint32_t rng, uint32_t (*next)(void *), void *state) {
    const uint32_t rng_excl = rng + 1;
    uint64_t m = (uint64_t)next(state) * rng_excl;
    uint32_t leftover = (uint32_t)m;
    if (leftover < rng_excl) {
        const uint32_t threshold = (UINT32_MAX - rng) % rng_excl;
        while (leftover < threshold) {
            m = (uint64_t)next(state) * rng_excl;
            leftover = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

#if HAVE_PCG64
/* A PCG64's 32-bit draws as numpy's next_uint32 makes them: each 64-bit output gives its low half,
 * and its high half is kept for the next (the state's has_uint32 and uinteger). */
typedef struct { U128 state, inc; int has; uint32_t kept; } PCG64Halves;

static inline uint32_t pcg64_next32(void *state) {
    PCG64Halves *g = state;
    if (g->has) {
        g->has = 0;
        return g->kept;
    }
    g->state = g->state * PCG64_MULT + g->inc;
    const uint64_t next = pcg64_out64(g->state);
    g->has = 1;
    g->kept = (uint32_t)(next >> 32);
    return (uint32_t)next;
}

#endif

/* replace_rows_pcg64(n, L, width, p, mask_id, vocab_size, input_ids, k, words, positions, original, weights):
 * replace_rows on the coin and random ids it draws itself, as mask_batch draws them after the
 * keys: rng.random((n, width)) then rng.integers(0, vocab_size, (n, width)), from the PCG64 whose
 * state is `words` (uint64 [state >> 64, state mod 2**64, inc >> 64, inc mod 2**64, has_uint32,
 * uinteger]: the state after choose_rows' keys), written back as those draws leave it. Row r's
 * coins are draws r width.. of the first stream and its ids come from the second, which starts
 * n width steps on: both run row by row, and no (n, width) array is made. 1 <= vocab_size <= 2**31.
 * False (nothing drawn or changed) where the module has no PCG64. */
static PyObject *replace_rows_pcg64(PyObject *self, PyObject *args) {
    Py_ssize_t n, L, width, p;
    long long mask_id, vocab_size;
    PyObject *objs[6];
    if (!PyArg_ParseTuple(args, "nnnnLLOOOOOO", &n, &L, &width, &p, &mask_id, &vocab_size, &objs[0], &objs[1],
                          &objs[2], &objs[3], &objs[4], &objs[5]))
        return NULL;
    if (n < 0 || L < 1 || width < 0 || p < width || width > L || !masking_sizes_fit(n, L, p) || vocab_size < 1 ||
        vocab_size > 0x80000000LL) {
        PyErr_SetString(PyExc_ValueError,
                        "replace_rows_pcg64: sizes must satisfy 0 <= width <= p, width <= L < 2**31, p < 2**31, n L and n p arrays that fit in memory, 1 <= vocab_size <= 2**31");
        return NULL;
    }
#if HAVE_PCG64
    const Py_ssize_t counts[6] = {n * L, n, 6, n * p, n * p, n * p};
    const Py_ssize_t items[6] = {4, 8, 8, 4, 4, 4};
    const char codes[6] = {'i', 'q', 'Q', 'i', 'i', 'f'};
    const int writable[6] = {1, 0, 1, 0, 1, 1};
    Py_buffer v[6];
    int nv = 0;
    PyObject *result = NULL;
    if (!typed_buffers(objs, v, &nv, 6, counts, items, codes, writable, "replace_rows_pcg64")) goto done;
    int32_t *ids = v[0].buf, *original = v[4].buf;
    const int64_t *k = v[1].buf;
    uint64_t *words = v[2].buf;
    const int32_t *positions = v[3].buf;
    float *weights = v[5].buf;
    if (!chosen_in_rows(n, L, width, p, k, positions, "replace_rows_pcg64")) goto done;
    const U128 inc = (U128)words[2] << 64 | words[3];
    U128 coins = (U128)words[0] << 64 | words[1];
    PCG64Halves draws = {pcg64_advance(coins, inc, (uint64_t)(n * width)), inc, words[4] != 0, (uint32_t)words[5]};
    const uint32_t rng = (uint32_t)(vocab_size - 1);
    const PCG64Jump4 jump = pcg64_jump4(inc);
    double *coin = PyMem_Malloc((size_t)(width ? width : 1) * sizeof(double));
    if (!coin) { PyErr_NoMemory(); goto done; }
    memset(original, 0, (size_t)(n * p) * 4);
    memset(weights, 0, (size_t)(n * p) * 4);
    for (Py_ssize_t r = 0; r < n; r++) {
        int32_t *row = ids + r * L;
        pcg64_fill(&coins, inc, jump, coin, width); /* the row's coins, four lanes at once */
        for (Py_ssize_t s = 0; s < width; s++) {
            const double c = coin[s];
            const int32_t random_id = rng ? (int32_t)lemire32(rng, pcg64_next32, &draws) : 0;
            if (s >= k[r]) continue;
            const Py_ssize_t at = r * p + s;
            const int32_t was = row[positions[at]];
            original[at] = was;
            weights[at] = 1.0f;
            row[positions[at]] = c < 0.8 ? (int32_t)mask_id : (c < 0.9 ? was : random_id);
        }
    }
    words[0] = (uint64_t)(draws.state >> 64);
    words[1] = (uint64_t)draws.state;
    words[4] = (uint64_t)draws.has;
    words[5] = draws.kept;
    PyMem_Free(coin);
    Py_INCREF(Py_True);
    result = Py_True;
done:
    release_all(v, nv);
    return result;
#else
    (void)objs;
    Py_RETURN_FALSE;
#endif
}

/* ---------------------------------------------------------------- whole-word masking (--mask_whole_word) */

static int any_vector(PyObject *obj, Py_buffer *view, int writable, char code1, Py_ssize_t item1, char code2,
                      Py_ssize_t item2, Py_ssize_t *count, const char *what); /* below, with the packed rows */

/* numpy's random_interval (distributions.c): uniform on [0, max] by masked rejection, 32-bit draws
 * below 2**32; what Generator.shuffle and permutation draw for each swap. */
static uint64_t np_interval(const BitGen *g, uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max, value;
    mask |= mask >> 1; mask |= mask >> 2; mask |= mask >> 4; mask |= mask >> 8; mask |= mask >> 16; mask |= mask >> 32;
    if (max <= 0xffffffffULL) {
        while ((value = (g->next_uint32(g->state) & mask)) > max) ;
    } else {
        while ((value = (g->next_uint64(g->state) & mask)) > max) ;
    }
    return value;
}

/* numpy's random_bounded_uint64_fill for a range under 2**32, unmasked (Generator.integers'
 * default): Lemire's multiply-and-reject on 32-bit draws; rng = high - low - 1. */
static uint64_t np_bounded32(const BitGen *g, uint32_t rng) {
    if (rng == 0) return 0;
    if (rng == 0xFFFFFFFFu) return g->next_uint32(g->state);
    return lemire32(rng, g->next_uint32, g->state);
}

/* One row of bert_data.masking._mask_whole_words, its draws in its order: permutation(words),
 * then (when a word was chosen) random(chosen words) and integers(0, vocab_size, picked). The
 * scratch holds L entries per array: a row's words (first position, length), their order, the
 * positions picked, each one's 80/10/10 outcome and new id, the coins. */
typedef struct {
    int64_t *start, *len, *order, *picked, *kind, *value;
    double *coin;
} WordScratch;

static void mask_words_row(const BitGen *g, int32_t *ids, const uint8_t *cand, const uint8_t *cont, Py_ssize_t L,
                           int64_t budget, int64_t vocab_size, int64_t mask_id, WordScratch *s, int64_t *pos_out,
                           int64_t *orig_out, uint8_t *used_out) {
    Py_ssize_t nwords = 0, prev = -2;
    for (Py_ssize_t j = 0; j < L; j++) {
        if (!cand[j]) continue;
        if (nwords && prev == j - 1 && cont[ids[j]]) s->len[nwords - 1]++;
        else { s->start[nwords] = j; s->len[nwords] = 1; nwords++; }
        prev = j;
    }
    for (Py_ssize_t w = 0; w < nwords; w++) s->order[w] = w;
    for (Py_ssize_t i = nwords - 1; i >= 1; i--) { /* Generator.permutation: shuffle(arange(nwords)) */
        const uint64_t j = np_interval(g, (uint64_t)i);
        const int64_t t = s->order[i]; s->order[i] = s->order[j]; s->order[j] = t;
    }
    int64_t npicked = 0, nchosen = 0;
    for (Py_ssize_t o = 0; o < nwords; o++) { /* greedy: a word that does not fit the budget is skipped */
        if (npicked >= budget) break;
        const int64_t w = s->order[o];
        if (npicked + s->len[w] > budget) continue;
        s->order[nchosen++] = w; /* the chosen words in order (nchosen <= o: nothing unread is overwritten) */
        for (int64_t t = 0; t < s->len[w]; t++) s->picked[npicked++] = s->start[w] + t;
    }
    if (!nchosen) return;
    for (int64_t c = 0; c < nchosen; c++) s->coin[c] = g->next_double(g->state);
    for (int64_t c = 0, at = 0; c < nchosen; c++) {
        const int64_t kind = s->coin[c] < 0.8 ? 0 : s->coin[c] < 0.9 ? 1 : 2;
        for (int64_t t = 0; t < s->len[s->order[c]]; t++) s->kind[at++] = kind;
    }
    for (int64_t r = 0; r < npicked; r++) { /* the random ids are drawn for every picked position */
        const int64_t random_id = (int64_t)np_bounded32(g, (uint32_t)(vocab_size - 1));
        const int64_t p = s->picked[r];
        s->value[r] = s->kind[r] == 0 ? mask_id : s->kind[r] == 1 ? (int64_t)ids[p] : random_id;
    }
    for (int64_t a = 1; a < npicked; a++) { /* by position (insertion sort: at most p of them) */
        const int64_t p = s->picked[a], v = s->value[a];
        int64_t b = a - 1;
        while (b >= 0 && s->picked[b] > p) { s->picked[b + 1] = s->picked[b]; s->value[b + 1] = s->value[b]; b--; }
        s->picked[b + 1] = p;
        s->value[b + 1] = v;
    }
    for (int64_t a = 0; a < npicked; a++) {
        pos_out[a] = s->picked[a];
        orig_out[a] = ids[s->picked[a]];
        used_out[a] = 1;
    }
    for (int64_t a = 0; a < npicked; a++) ids[s->picked[a]] = (int32_t)s->value[a];
}

/* mask_words(n, L, p, input_ids, candidates, is_continuation, k, capsule, vocab_size, mask_id,
 * positions, original, used) -> bool: bert_data.masking._mask_whole_words for every row, drawing
 * from the numpy BitGenerator behind `capsule` (its next_uint32 and next_double: numpy's own, so
 * its buffered 32-bit half is honoured) exactly as the Python rows draw from the Generator. Into
 * int32 (n, L) input_ids (masked in place) and zero-filled int64 (n, p) positions, original and
 * bool (n, p) used. False, before any draw, when a candidate's id is outside the is_continuation
 * table (uint8 or bool), a k outside 0..min(p, L) or vocab_size outside 1..2**31: the caller runs
 * Python. The caller holds the BitGenerator's lock. */
static PyObject *mask_words(PyObject *self, PyObject *args) {
    Py_ssize_t n, L, p;
    long long vocab_size, mask_id;
    PyObject *o[8];
    if (!PyArg_ParseTuple(args, "nnnOOOOOLLOOO", &n, &L, &p, &o[0], &o[1], &o[2], &o[3], &o[4], &vocab_size, &mask_id,
                          &o[5], &o[6], &o[7]))
        return NULL;
    if (n < 0 || L < 1 || p < 0) { PyErr_SetString(PyExc_ValueError, "mask_words: n >= 0, L >= 1, p >= 0"); return NULL; }
    Py_buffer v[7];
    int nv = 0;
    PyObject *result = NULL;
    void *mem = NULL;
    Py_ssize_t table = 0;
    if (!typed_buffer(o[0], &v[0], 1, n * L, 4, 'i', "mask_words")) goto done;
    nv++;
    if (!typed_buffer(o[1], &v[1], 0, n * L, 1, '?', "mask_words")) goto done;
    nv++;
    if (!any_vector(o[2], &v[2], 0, '?', 1, 'B', 1, &table, "mask_words")) goto done;
    nv++;
    if (!typed_buffer(o[3], &v[3], 0, n, 8, 'q', "mask_words")) goto done;
    nv++;
    if (!typed_buffer(o[5], &v[4], 1, n * p, 8, 'q', "mask_words")) goto done;
    nv++;
    if (!typed_buffer(o[6], &v[5], 1, n * p, 8, 'q', "mask_words")) goto done;
    nv++;
    if (!typed_buffer(o[7], &v[6], 1, n * p, 1, '?', "mask_words")) goto done;
    nv++;
    const BitGen *g = PyCapsule_GetPointer(o[4], "BitGenerator");
    if (!g) goto done;
    int32_t *ids = v[0].buf;
    const uint8_t *cand = v[1].buf, *cont = v[2].buf;
    const int64_t *k = v[3].buf;
    int ok = vocab_size >= 1 && vocab_size <= 2147483648LL; /* a random id fits int32 */
    for (Py_ssize_t r = 0; r < n && ok; r++) {
        ok = k[r] >= 0 && k[r] <= p && k[r] <= L;
        for (Py_ssize_t j = 0; j < L && ok; j++)
            if (cand[r * L + j]) ok = ids[r * L + j] >= 0 && ids[r * L + j] < table;
    }
    if (ok) {
        mem = PyMem_Malloc((size_t)L * (6 * sizeof(int64_t) + sizeof(double)));
        if (!mem) { PyErr_NoMemory(); goto done; }
        int64_t *m = mem;
        WordScratch s = {m, m + L, m + 2 * L, m + 3 * L, m + 4 * L, m + 5 * L, (double *)(m + 6 * L)};
        int64_t *pos = v[4].buf, *orig = v[5].buf;
        uint8_t *used = v[6].buf;
        for (Py_ssize_t r = 0; r < n; r++)
            mask_words_row(g, ids + r * L, cand + r * L, cont, L, k[r], vocab_size, mask_id, &s, pos + r * p,
                           orig + r * p, used + r * p);
    }
    result = PyBool_FromLong(ok);
done:
    PyMem_Free(mem);
    release_all(v, nv);
    return result;
}

/* ---------------------------------------------------------------- packed rows (--packing) */

/* A vector argument: C-contiguous, of one of the two formats asked (code2 0: one), any length
 * (its count into *count); writable when asked. 0 and an error if not. */
static int any_vector(PyObject *obj, Py_buffer *view, int writable, char code1, Py_ssize_t item1, char code2,
                      Py_ssize_t item2, Py_ssize_t *count, const char *what) {
    if (PyObject_GetBuffer(obj, view, (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return 0;
    const char *fmt = view->format ? view->format : "B";
    if (*fmt == '@' || *fmt == '=' || *fmt == '<') fmt++;
    char got = fmt[0] == 'l' && view->itemsize == 8 ? 'q' : fmt[0] == 'L' && view->itemsize == 8 ? 'Q' : fmt[0];
    if (fmt[1] == 0 && ((got == code1 && view->itemsize == item1) || (code2 && got == code2 && view->itemsize == item2))) {
        *count = view->len / view->itemsize;
        return 1;
    }
    PyErr_Format(PyExc_TypeError, "%s: needs a C-contiguous vector of format '%c'", what, code1);
    PyBuffer_Release(view);
    return 0;
}

/* pack_rows(L, B, K, ids, segments, tok_start, lengths, npred, pred_start, mlm_pos, mlm_ids, labels, members, depths,
 *           input_ids, input_mask, positions, segment_ids, masked_lm_positions, masked_lm_ids, masked_lm_weights,
 *           next_sentence_positions, next_sentence_labels, next_sentence_weights) -> bool:
 * bert_data.packing.assemble_rows' arrays, row by row, from a buffer of compact instances
 * (`ids` uint16 or int32 and int8 `segments` of all its tokens back to back, each instance's
 * `tok_start`, `lengths`, `npred`, `pred_start` (int64), its predictions' int32 `mlm_pos` (within
 * the instance) and `mlm_ids`, its int32 `labels`) and the rows' instances (`members`, int64, row
 * after row, `depths` instances each). Into outputs (every entry written, padding 0): int32 (rows, L) input_ids,
 * input_mask (the instance's place in its row, 1..k), positions (0 at each instance's first
 * token) and segment_ids; (rows, B) int32 masked_lm_positions (offsets into the row),
 * masked_lm_ids and float32 masked_lm_weights (the instance's place); (rows, K) int32
 * next_sentence_positions, next_sentence_labels, float32 next_sentence_weights (1.0). segments,
 * labels, segment_ids and next_sentence_* are None for rows without segments (MLM-only).
 * False (outputs unspecified) when an index is outside the buffer or a row overflows L, B or K:
 * the caller runs numpy. */
static PyObject *pack_rows(PyObject *self, PyObject *args) {
    Py_ssize_t L, B, K;
    PyObject *o[21];
    if (!PyArg_ParseTuple(args, "nnnOOOOOOOOOOOOOOOOOOOOO", &L, &B, &K, &o[0], &o[1], &o[2], &o[3], &o[4], &o[5],
                          &o[6], &o[7], &o[8], &o[9], &o[10], &o[11], &o[12], &o[13], &o[14], &o[15], &o[16], &o[17],
                          &o[18], &o[19], &o[20]))
        return NULL;
    if (L < 1 || B < 0 || K < 1) { PyErr_SetString(PyExc_ValueError, "pack_rows: L >= 1, B >= 0, K >= 1"); return NULL; }
    const int paired = o[1] != Py_None;
    const int needs[21] = {1, paired, 1, 1, 1, 1, 1, 1, paired, 1, 1, 1, 1, 1, paired, 1, 1, 1, paired, paired, paired};
    if (paired && (o[8] == Py_None || o[14] == Py_None || o[18] == Py_None || o[19] == Py_None || o[20] == Py_None)) {
        PyErr_SetString(PyExc_TypeError, "pack_rows: rows with segments need labels and next_sentence_* outputs");
        return NULL;
    }
    /* formats: ids H/i, segments b, int64 q, int32 i, float32 f */
    const char code1[21] = {'H', 'b', 'q', 'q', 'q', 'q', 'i', 'i', 'i', 'q', 'q', 'i', 'i', 'i', 'i', 'i', 'i', 'f', 'i', 'i', 'f'};
    const Py_ssize_t item1[21] = {2, 1, 8, 8, 8, 8, 4, 4, 4, 8, 8, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4};
    Py_buffer v[21];
    Py_ssize_t count[21] = {0};
    int got[21] = {0};
    PyObject *result = NULL;
    for (int a = 0; a < 21; a++) {
        if (!needs[a]) continue;
        if (!any_vector(o[a], &v[a], a >= 11, code1[a], item1[a], a == 0 ? 'i' : 0, 4, &count[a], "pack_rows")) goto done;
        got[a] = 1;
    }
    const Py_ssize_t n = count[3], m = count[9], rows = count[10], tokens = count[0], preds = count[6];
    if (count[2] != n || count[4] != n || count[5] != n || count[7] != preds || (paired && (count[1] != tokens || count[8] != n))
        || count[11] != rows * L || count[12] != rows * L || count[13] != rows * L || (paired && count[14] != rows * L)
        || count[15] != rows * B || count[16] != rows * B || count[17] != rows * B
        || (paired && (count[18] != rows * K || count[19] != rows * K || count[20] != rows * K))) {
        PyErr_SetString(PyExc_ValueError, "pack_rows: array sizes do not agree");
        goto done;
    }
    const int wide = v[0].itemsize == 4;
    const uint16_t *ids16 = v[0].buf;
    const int32_t *ids32 = v[0].buf;
    const int8_t *segments = paired ? v[1].buf : NULL;
    const int64_t *tok_start = v[2].buf, *lengths = v[3].buf, *npred = v[4].buf, *pred_start = v[5].buf;
    const int32_t *mlm_pos = v[6].buf, *mlm_ids = v[7].buf, *labels = paired ? v[8].buf : NULL;
    const int64_t *members = v[9].buf, *depths = v[10].buf;
    int32_t *out_ids = v[11].buf, *out_mask = v[12].buf, *out_pos = v[13].buf, *out_seg = paired ? v[14].buf : NULL;
    int32_t *out_mpos = v[15].buf, *out_mids = v[16].buf;
    float *out_mw = v[17].buf;
    int32_t *out_npos = paired ? v[18].buf : NULL, *out_nlab = paired ? v[19].buf : NULL;
    float *out_nw = paired ? v[20].buf : NULL;
    int ok = 1;
    Py_ssize_t next = 0;
    for (Py_ssize_t r = 0; r < rows && ok; r++) {
        const int64_t depth = depths[r];
        if (depth < 1 || depth > K || next + depth > m) { ok = 0; break; }
        int64_t used = 0, predicted = 0;
        for (int64_t s = 0; s < depth; s++) {
            const int64_t i = members[next + s];
            if (i < 0 || i >= n) { ok = 0; break; }
            const int64_t len = lengths[i], start = tok_start[i], np_ = npred[i], ps = pred_start[i];
            if (len < 0 || start < 0 || start + len > tokens || used + len > L || np_ < 0 || ps < 0 || ps + np_ > preds
                || predicted + np_ > B) { ok = 0; break; }
            const Py_ssize_t off = r * L + used;
            if (wide) memcpy(out_ids + off, ids32 + start, (size_t)len * 4);
            else for (int64_t t = 0; t < len; t++) out_ids[off + t] = ids16[start + t];
            for (int64_t t = 0; t < len; t++) out_mask[off + t] = (int32_t)(s + 1);
            for (int64_t t = 0; t < len; t++) out_pos[off + t] = (int32_t)t;
            if (paired)
                for (int64_t t = 0; t < len; t++) out_seg[off + t] = segments[start + t];
            const Py_ssize_t poff = r * B + predicted;
            for (int64_t p = 0; p < np_; p++) {
                out_mpos[poff + p] = mlm_pos[ps + p] + (int32_t)used;
                out_mids[poff + p] = mlm_ids[ps + p];
                out_mw[poff + p] = (float)(s + 1);
            }
            if (paired) {
                out_npos[r * K + s] = (int32_t)used;
                out_nlab[r * K + s] = labels[i];
                out_nw[r * K + s] = 1.0f;
            }
            used += len;
            predicted += np_;
        }
        if (!ok) break;
        const size_t pad = (size_t)(L - used) * 4, off = (size_t)(r * L + used); /* the outputs may be uninitialised */
        memset(out_ids + off, 0, pad);
        memset(out_mask + off, 0, pad);
        memset(out_pos + off, 0, pad);
        if (paired) memset(out_seg + off, 0, pad);
        const size_t ppad = (size_t)(B - predicted) * 4, poff = (size_t)(r * B + predicted);
        memset(out_mpos + poff, 0, ppad);
        memset(out_mids + poff, 0, ppad);
        memset(out_mw + poff, 0, ppad); /* 0.0f is all zero bits */
        if (paired) {
            const size_t kpad = (size_t)(K - depth) * 4, koff = (size_t)(r * K + depth);
            memset(out_npos + koff, 0, kpad);
            memset(out_nlab + koff, 0, kpad);
            memset(out_nw + koff, 0, kpad);
        }
        next += depth;
    }
    if (ok && next != m) ok = 0;
    result = PyBool_FromLong(ok);
done:
    for (int a = 0; a < 21; a++)
        if (got[a]) PyBuffer_Release(&v[a]);
    return result;
}

/* prefix_counts(values, width, counts) -> bool: each row's number of nonzero entries into int64
 * counts (n rows), from a C-contiguous int32 or float32 array of n rows of `width` (a batch's
 * input_mask or masked_lm_weights). False (counts unspecified) when a row's nonzero entries are
 * not its first ones: the caller then gathers with numpy's boolean masks, which need no prefix. */
static PyObject *prefix_counts(PyObject *self, PyObject *args) {
    PyObject *o[2];
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "OnO", &o[0], &width, &o[1])) return NULL;
    Py_buffer v[2];
    Py_ssize_t count[2];
    if (!any_vector(o[0], &v[0], 0, 'i', 4, 'f', 4, &count[0], "prefix_counts")) return NULL;
    if (!any_vector(o[1], &v[1], 1, 'q', 8, 0, 0, &count[1], "prefix_counts")) { PyBuffer_Release(&v[0]); return NULL; }
    PyObject *result = NULL;
    if (width < 1 || count[0] != count[1] * width) {
        PyErr_SetString(PyExc_ValueError, "prefix_counts: values must hold len(counts) rows of width");
        goto done;
    }
    const char *fmt = v[0].format ? v[0].format : "i";
    if (*fmt == '@' || *fmt == '=' || *fmt == '<') fmt++;
    const int is_float = fmt[0] == 'f';
    const int32_t *ints = v[0].buf;
    const float *floats = v[0].buf;
    int64_t *counts = v[1].buf;
    int ok = 1;
    for (Py_ssize_t r = 0; r < count[1] && ok; r++) {
        Py_ssize_t j = 0, off = r * width;
        if (is_float) {
            while (j < width && floats[off + j] != 0.0f) j++;
            for (Py_ssize_t t = j; t < width; t++) ok &= floats[off + t] == 0.0f;
        } else {
            while (j < width && ints[off + j] != 0) j++;
            for (Py_ssize_t t = j; t < width; t++) ok &= ints[off + t] == 0;
        }
        counts[r] = j;
    }
    result = PyBool_FromLong(ok);
done:
    PyBuffer_Release(&v[0]);
    PyBuffer_Release(&v[1]);
    return result;
}

/* gather_prefixes(values, width, counts, out, at) -> bool: the first counts[r] int32 entries of
 * each row r of `values` (C-contiguous, len(counts) rows of `width`), back to back into the
 * vector `out` (uint16, int8 or int32) from index `at`. False (out unspecified from `at` on) when
 * a count is outside 0..width, they overflow `out`, or a value does not fit its type (ids of a
 * vocabulary over 65,536 into uint16): the caller widens or runs numpy. */
static PyObject *gather_prefixes(PyObject *self, PyObject *args) {
    PyObject *o[3];
    Py_ssize_t width, at;
    if (!PyArg_ParseTuple(args, "OnOOn", &o[0], &width, &o[1], &o[2], &at)) return NULL;
    Py_buffer v[3];
    Py_ssize_t count[3];
    int got = 0;
    PyObject *result = NULL;
    if (!any_vector(o[0], &v[0], 0, 'i', 4, 0, 0, &count[0], "gather_prefixes")) goto done;
    got = 1;
    if (!any_vector(o[1], &v[1], 0, 'q', 8, 0, 0, &count[1], "gather_prefixes")) goto done;
    got = 2;
    if (PyObject_GetBuffer(o[2], &v[2], PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
    got = 3;
    const char *fmt = v[2].format ? v[2].format : "B";
    if (*fmt == '@' || *fmt == '=' || *fmt == '<') fmt++;
    const char code = fmt[1] ? 0 : fmt[0];
    if (!((code == 'H' && v[2].itemsize == 2) || (code == 'b' && v[2].itemsize == 1) || (code == 'i' && v[2].itemsize == 4))) {
        PyErr_SetString(PyExc_TypeError, "gather_prefixes: out must be a uint16, int8 or int32 vector");
        goto done;
    }
    if (width < 1 || count[0] != count[1] * width || at < 0) {
        PyErr_SetString(PyExc_ValueError, "gather_prefixes: values must hold len(counts) rows of width, at >= 0");
        goto done;
    }
    const int32_t *values = v[0].buf;
    const int64_t *counts = v[1].buf;
    const Py_ssize_t capacity = v[2].len / v[2].itemsize;
    int ok = 1;
    Py_ssize_t next = at;
    for (Py_ssize_t r = 0; r < count[1] && ok; r++) {
        const int64_t c = counts[r];
        if (c < 0 || c > width || next + c > capacity) { ok = 0; break; }
        const int32_t *row = values + r * width;
        if (code == 'i') {
            memcpy((int32_t *)v[2].buf + next, row, (size_t)c * 4);
        } else if (code == 'H') { /* two simple loops: both vectorise */
            uint16_t *dst = (uint16_t *)v[2].buf + next;
            uint32_t bits = 0;
            for (int64_t t = 0; t < c; t++) bits |= (uint32_t)row[t];
            for (int64_t t = 0; t < c; t++) dst[t] = (uint16_t)row[t];
            ok = bits <= 0xFFFFu;
        } else {
            int8_t *dst = (int8_t *)v[2].buf + next;
            int32_t low = 0, high = 0;
            for (int64_t t = 0; t < c; t++) { low = row[t] < low ? row[t] : low; high = row[t] > high ? row[t] : high; }
            for (int64_t t = 0; t < c; t++) dst[t] = (int8_t)row[t];
            ok = low >= -128 && high <= 127;
        }
        next += c;
    }
    result = PyBool_FromLong(ok);
done:
    if (got >= 1) PyBuffer_Release(&v[0]);
    if (got >= 2) PyBuffer_Release(&v[1]);
    if (got >= 3) PyBuffer_Release(&v[2]);
    return result;
}

/* copy_ranges: src[starts[i] : starts[i] + lengths[i]] for each i, back to back into out from at
 * (MDS's PieceAppender: a batch of frames' samples into a piece, ~43,000 of them per 92 MB, where a
 * Python slice assignment each cost 0.06 s). Returns the end; every range is checked first. */
static PyObject *copy_ranges(PyObject *self, PyObject *args) {
    PyObject *o[4];
    Py_ssize_t at;
    if (!PyArg_ParseTuple(args, "OOOOn", &o[0], &o[1], &o[2], &o[3], &at)) return NULL;
    Py_buffer v[4];
    Py_ssize_t count[2];
    int got = 0;
    PyObject *result = NULL;
    if (PyObject_GetBuffer(o[0], &v[0], PyBUF_C_CONTIGUOUS) < 0) goto done;
    got = 1;
    if (!any_vector(o[1], &v[1], 0, 'q', 8, 0, 0, &count[0], "copy_ranges")) goto done;
    got = 2;
    if (!any_vector(o[2], &v[2], 0, 'q', 8, 0, 0, &count[1], "copy_ranges")) goto done;
    got = 3;
    if (PyObject_GetBuffer(o[3], &v[3], PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) goto done;
    got = 4;
    const int64_t *starts = v[1].buf, *lengths = v[2].buf;
    int64_t total = 0, room = (int64_t)v[3].len - (int64_t)at; /* total never passes room: it cannot overflow */
    int ok = count[0] == count[1] && at >= 0 && room >= 0;
    for (Py_ssize_t i = 0; i < count[0] && ok; i++) {
        ok = starts[i] >= 0 && lengths[i] >= 0 && lengths[i] <= (int64_t)v[0].len && starts[i] <= (int64_t)v[0].len - lengths[i]
             && lengths[i] <= room - total;
        total += ok ? lengths[i] : 0;
    }
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "copy_ranges: a range outside src, or out too small");
        goto done;
    }
    char *out = (char *)v[3].buf + at;
    const char *src = v[0].buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count[0]; i++) {
        memmove(out, src + starts[i], (size_t)lengths[i]); /* (memmove: a caller may pass overlapping buffers) */
        out += lengths[i];
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(at + (Py_ssize_t)total);
done:
    for (int k = got - 1; k >= 0; k--) PyBuffer_Release(&v[k]);
    return result;
}

/* ---------------------------------------------------------------- best_fill (--packing) */

/* bert_data.packing.best_fill, step for step (its docstring says what and why; the Python is the
 * reference, and tests hold the two to the same packs). The instances left, by length: `order`
 * holds each length's stack (lowest index and fewest predictions on top, as _Histogram sorts
 * them) from bounds[len], count[len] of them left; `present` the lengths left, ascending. */
typedef struct {
    const int64_t *pred;
    int64_t *order, *bounds, *count, *present;
    Py_ssize_t npresent;
} Hist;

static Py_ssize_t bisect_r(const int64_t *a, Py_ssize_t lo, Py_ssize_t hi, int64_t x) {
    while (lo < hi) { Py_ssize_t mid = (lo + hi) / 2; if (x < a[mid]) hi = mid; else lo = mid + 1; }
    return lo;
}

static Py_ssize_t bisect_l(const int64_t *a, Py_ssize_t lo, Py_ssize_t hi, int64_t x) {
    while (lo < hi) { Py_ssize_t mid = (lo + hi) / 2; if (a[mid] < x) lo = mid + 1; else hi = mid; }
    return lo;
}

static int64_t h_take(Hist *h, int64_t length) {
    int64_t index = h->order[h->bounds[length] + --h->count[length]];
    if (!h->count[length]) {
        Py_ssize_t j = bisect_l(h->present, 0, h->npresent, length);
        memmove(h->present + j, h->present + j + 1, (size_t)(h->npresent - j - 1) * sizeof(int64_t));
        h->npresent--;
    }
    return index;
}

static int64_t h_fewest(const Hist *h, int64_t length, int nth) { return h->pred[h->order[h->bounds[length] + h->count[length] - nth]]; }

static int64_t h_longest_fitting(const Hist *h, int64_t free_tokens, int64_t free_preds) {
    for (Py_ssize_t j = bisect_r(h->present, 0, h->npresent, free_tokens) - 1; j >= 0; j--)
        if (h_fewest(h, h->present[j], 1) <= free_preds) return h->present[j];
    return 0;
}

static int64_t h_partner(const Hist *h, int64_t longer, int64_t free_tokens, int64_t free_preds) {
    int64_t limit = free_tokens - longer < longer ? free_tokens - longer : longer;
    for (Py_ssize_t j = bisect_r(h->present, 0, h->npresent, limit) - 1; j >= 0; j--) {
        const int64_t partner = h->present[j];
        const int nth = partner == longer ? 2 : 1;
        if (h->count[partner] >= nth && h_fewest(h, longer, 1) + h_fewest(h, partner, nth) <= free_preds) return partner;
    }
    return 0;
}

/* _Histogram.best_fill: the lengths into fill[0..] (0, 1 or 2 of them; their number returned) */
static int h_best_fill(const Hist *h, int64_t free_tokens, int64_t free_preds, int64_t slots, int64_t *fill) {
    const int64_t *present = h->present;
    const Py_ssize_t top = bisect_r(present, 0, h->npresent, free_tokens);
    int64_t key0 = 0, key1 = 0;
    int n = 0;
    for (Py_ssize_t j = top - 1; j >= 0; j--)
        if (h_fewest(h, present[j], 1) <= free_preds) { key0 = present[j]; key1 = -present[j]; fill[0] = present[j]; n = 1; break; }
    if (slots < 2 || (slots > 2 && key0 == free_tokens) || !top) return n;
    const Py_ssize_t upper = bisect_r(present, 0, top, free_tokens - present[0]);
    const Py_ssize_t half = bisect_l(present, 0, upper, (free_tokens + 1) / 2);
    for (Py_ssize_t j = half; j < upper; j++) {
        const int64_t longer = present[j], partner = free_tokens - longer;
        const int nth = partner == longer ? 2 : 1;
        if (h->count[partner] >= nth && h_fewest(h, longer, 1) + h_fewest(h, partner, nth) <= free_preds) {
            fill[0] = longer; fill[1] = partner;
            return 2;
        }
    }
    for (Py_ssize_t j = half; j < upper; j++) {
        const int64_t longer = present[j], partner = h_partner(h, longer, free_tokens, free_preds);
        if (partner && (longer + partner > key0 || (longer + partner == key0 && -longer > key1))) {
            key0 = longer + partner; key1 = -longer; fill[0] = longer; fill[1] = partner; n = 2;
        }
    }
    for (Py_ssize_t j = half - 1; j >= 0; j--) {
        const int64_t longer = present[j];
        if (2 * longer < key0) break;
        const int64_t partner = h_partner(h, longer, free_tokens, free_preds);
        if (partner && (longer + partner > key0 || (longer + partner == key0 && -longer > key1))) {
            key0 = longer + partner; key1 = -longer; fill[0] = longer; fill[1] = partner; n = 2;
        }
    }
    return n;
}

/* best_fill(lengths, predictions, order, max_length, budget, K, members, depths) -> rows: the
 * packs of bert_data.packing.best_fill as int64 `members` (n, the packs' instances back to back)
 * and `depths` (one per pack; their number returned). `order` (int64, n) is _Histogram's sort:
 * by length, then most predictions first, then highest index first. ValueError when a length is
 * outside 1..max_length or `order` is not such a sort (the caller checked both). */
static PyObject *best_fill_c(PyObject *self, PyObject *args) {
    PyObject *o[5];
    Py_ssize_t max_length, budget, K;
    if (!PyArg_ParseTuple(args, "OOOnnnOO", &o[0], &o[1], &o[2], &max_length, &budget, &K, &o[3], &o[4])) return NULL;
    Py_buffer v[5];
    Py_ssize_t count[5];
    int got = 0;
    PyObject *result = NULL;
    int64_t *mem = NULL;
    for (; got < 5; got++)
        if (!any_vector(o[got], &v[got], got >= 3, 'q', 8, 0, 0, &count[got], "best_fill")) goto done;
    const Py_ssize_t n = count[0];
    if (count[1] != n || count[2] != n || count[3] != n || count[4] != n || max_length < 1 || K < 1) {
        PyErr_SetString(PyExc_ValueError, "best_fill: n lengths, predictions, order, members and depths; max_length, K >= 1");
        goto done;
    }
    const int64_t *lengths = v[0].buf;
    Hist h = {v[1].buf, v[2].buf, NULL, NULL, NULL, 0};
    mem = PyMem_Calloc((size_t)(3 * (max_length + 2)), sizeof(int64_t));
    if (!mem) { PyErr_NoMemory(); goto done; }
    h.bounds = mem; h.count = mem + max_length + 2; h.present = mem + 2 * (max_length + 2);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (lengths[i] < 1 || lengths[i] > max_length) { PyErr_SetString(PyExc_ValueError, "best_fill: a length outside 1..max_length"); goto done; }
        h.count[lengths[i]]++;
    }
    for (int64_t len = 1, at = 0; len <= max_length; len++) {
        h.bounds[len] = at;
        at += h.count[len];
        if (h.count[len]) h.present[h.npresent++] = len;
    }
    for (Py_ssize_t i = 0; i < n; i++) { /* order must list each length's instances within its bounds */
        const int64_t at = h.order[i];
        if (at < 0 || at >= n || i < h.bounds[lengths[at]] || i >= h.bounds[lengths[at]] + h.count[lengths[at]]) {
            PyErr_SetString(PyExc_ValueError, "best_fill: order is not sorted by length");
            goto done;
        }
    }
    int64_t *members = v[3].buf, *depths = v[4].buf;
    Py_ssize_t placed = 0, rows = 0;
    for (int64_t length = max_length; length >= 1; length--) {
        while (h.count[length]) {
            int64_t free_tokens = max_length - length;
            if (K == 1 || free_tokens < h.present[0]) { /* nothing left is short enough: one row each */
                while (h.count[length]) { members[placed++] = h_take(&h, length); depths[rows++] = 1; }
                break;
            }
            const int64_t first = h_take(&h, length);
            members[placed++] = first;
            int64_t depth = 1, free_preds = budget - h.pred[first], fill[2];
            while (free_tokens && depth < K) {
                const int64_t slots = K - depth;
                int nfill = h_best_fill(&h, free_tokens, free_preds, slots, fill);
                if (!nfill) break;
                if (slots > 2 && (nfill == 1 ? fill[0] : fill[0] + fill[1]) < free_tokens) {
                    fill[0] = h_longest_fitting(&h, free_tokens, free_preds);
                    nfill = fill[0] ? 1 : 0;
                    if (!nfill) break;
                }
                for (int f = 0; f < nfill; f++) {
                    const int64_t index = h_take(&h, fill[f]);
                    members[placed++] = index;
                    depth++;
                    free_tokens -= fill[f];
                    free_preds -= h.pred[index];
                }
                if (slots <= 2 || !free_tokens) break;
            }
            depths[rows++] = depth;
        }
    }
    result = PyLong_FromSsize_t(rows);
done:
    PyMem_Free(mem);
    for (int a = 0; a < got; a++) PyBuffer_Release(&v[a]);
    return result;
}

/* ---------------------------------------------------------------- a pass's pair plan (plan_pairs) */

/* CPython's Mersenne Twister (Modules/_randommodule.c) and the draws of random.Random built on
 * it, bit for bit: the planner runs on the state of the caller's random.Random (getstate()'s 624
 * words and index) and hands the state back, so that what the caller draws next is unchanged. */
#define MT_N 624
#define MT_M 397

typedef struct {
    uint32_t state[MT_N];
    int index;
} MT;

/* genrand_uint32 */
static uint32_t mt_next(MT *g) {
    static const uint32_t mag01[2] = {0x0U, 0x9908b0dfU};
    uint32_t *mt = g->state, y;
    if (g->index >= MT_N) {
        int kk;
        for (kk = 0; kk < MT_N - MT_M; kk++) {
            y = (mt[kk] & 0x80000000U) | (mt[kk + 1] & 0x7fffffffU);
            mt[kk] = mt[kk + MT_M] ^ (y >> 1) ^ mag01[y & 0x1U];
        }
        for (; kk < MT_N - 1; kk++) {
            y = (mt[kk] & 0x80000000U) | (mt[kk + 1] & 0x7fffffffU);
            mt[kk] = mt[kk + (MT_M - MT_N)] ^ (y >> 1) ^ mag01[y & 0x1U];
        }
        y = (mt[MT_N - 1] & 0x80000000U) | (mt[0] & 0x7fffffffU);
        mt[MT_N - 1] = mt[MT_M - 1] ^ (y >> 1) ^ mag01[y & 0x1U];
        g->index = 0;
    }
    y = mt[g->index++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680U;
    y ^= (y << 15) & 0xefc60000U;
    y ^= (y >> 18);
    return y;
}

/* random.Random.random() */
static double mt_random(MT *g) {
    uint32_t a = mt_next(g) >> 5, b = mt_next(g) >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

/* getrandbits(k), 0 <= k <= 64: 32-bit words from the least significant, the last one's
 * surplus low bits dropped; k 0 draws nothing */
static uint64_t mt_bits(MT *g, int k) {
    if (k == 0) return 0;
    if (k <= 32) return mt_next(g) >> (32 - k);
    const uint64_t low = mt_next(g);
    return low | (uint64_t)(mt_next(g) >> (64 - k)) << 32;
}

#if defined(__GNUC__) || defined(__clang__)
#define POPCOUNT32(x) __builtin_popcount(x)
#else
static int POPCOUNT32(uint32_t x) { int n = 0; for (; x; x &= x - 1) n++; return n; }
#endif

/* The number of one bits of getrandbits(k), k >= 0 (the same words drawn) */
static int64_t mt_popcount_bits(MT *g, int64_t k) {
    int64_t ones = 0;
    for (; k > 0; k -= 32) {
        uint32_t r = mt_next(g);
        if (k < 32) r >>= 32 - k;
        ones += POPCOUNT32(r);
    }
    return ones;
}

/* randint(a, b) = a + _randbelow(b - a + 1) with getrandbits (rejection of k-bit draws, k the
 * width's bit length); 0 when Python would raise (b < a) or the width needs 65 bits */
static int mt_randint(MT *g, int64_t a, int64_t b, int64_t *out) {
    if (b < a) return 0;
    const uint64_t width = (uint64_t)b - (uint64_t)a + 1;
    if (width == 0) return 0;
    const int k = 64 - CLZ64(width);
    uint64_t r = mt_bits(g, k);
    while (r >= width) r = mt_bits(g, k);
    *out = (int64_t)((uint64_t)a + r);
    return 1;
}

/* One pass's inputs, counters and outputs (bert_data.instances._PassPlanner) */
typedef struct {
    MT rng;
    int64_t max_num_tokens, min_short;
    double short_seq_prob;
    const int64_t *off, *doc_starts; /* the unit: sentence offsets, each document's first sentence */
    Py_ssize_t n_docs;
    const int64_t *neg_off, *neg_starts; /* the negatives: the same, tokens at base + offset */
    Py_ssize_t n_neg_docs;
    int64_t base;
    const int64_t *excl_starts, *excl; /* unit document d may not use excl[excl_starts[d] .. excl_starts[d + 1]) */
    int64_t *out[5];                   /* a_lo, a_hi, b_lo, b_hi, is_random_next */
    Py_ssize_t capacity, n;
    int64_t unavailable, random_next, single, kept;
} Planner;

static int plan_target(Planner *p, int64_t *target) {
    if (mt_random(&p->rng) < p->short_seq_prob) return mt_randint(&p->rng, p->min_short, p->max_num_tokens, target);
    *target = p->max_num_tokens;
    return 1;
}

/* truncate_pair: v = a_lo, a_hi, b_lo, b_hi; 0 where getrandbits would overflow a C int */
static int plan_truncate(Planner *p, int64_t *v) {
    for (;;) {
        const int64_t la = v[1] - v[0], lb = v[3] - v[2], excess = la + lb - p->max_num_tokens;
        int64_t from_a = 0, from_b = 0;
        if (excess <= 0) return 1;
        if (la == lb) {
            from_b = (excess + 1) / 2;
            from_a = excess / 2;
        } else if (la > lb) {
            from_a = excess < la - lb ? excess : la - lb;
        } else {
            from_b = excess < lb - la ? excess : lb - la;
        }
        if (from_a > INT_MAX || from_b > INT_MAX) return 0;
        if (from_a) {
            const int64_t front = mt_popcount_bits(&p->rng, from_a);
            v[0] += front;
            v[1] -= from_a - front;
        }
        if (from_b) {
            const int64_t front = mt_popcount_bits(&p->rng, from_b);
            v[2] += front;
            v[3] -= from_b - front;
        }
    }
}

static int plan_emit(Planner *p, int64_t *v, int64_t label) {
    if (!plan_truncate(p, v) || p->n >= p->capacity) return 0;
    for (int f = 0; f < 4; f++) p->out[f][p->n] = v[f];
    p->out[4][p->n++] = label;
    return 1;
}

/* _random_segment: B from the r-th document of the negatives other than the `n_excl` excluded,
 * from a random sentence until target_b tokens (bisect_left over the sentence ends) */
static int plan_random_b(Planner *p, const int64_t *excl, int64_t n_excl, int64_t target_b, int64_t *v) {
    int64_t r, start;
    if (!mt_randint(&p->rng, 0, p->n_neg_docs - n_excl - 1, &r)) return 0;
    for (int64_t e = 0; e < n_excl; e++) {
        if (r < excl[e]) break;
        r++;
    }
    if (r < 0 || r >= p->n_neg_docs) return 0;
    const int64_t r_begin = p->neg_starts[r], r_end = p->neg_starts[r + 1];
    if (!mt_randint(&p->rng, r_begin, r_end - 1, &start)) return 0; /* an empty document: Python raises */
    const int64_t *off = p->neg_off, b_lo = off[start], x = b_lo + target_b;
    int64_t lo = start + 1, hi = r_end + 1;
    while (lo < hi) {
        const int64_t mid = (lo + hi) / 2;
        if (off[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    v[2] = p->base + b_lo;
    v[3] = p->base + off[lo < r_end ? lo : r_end];
    return 1;
}

/* _PassPlanner.nsp_document */
static int plan_nsp(Planner *p, Py_ssize_t d) {
    const int64_t *off = p->off, s_begin = p->doc_starts[d], s_end = p->doc_starts[d + 1];
    const int64_t e_lo = p->excl_starts[d], n_excl = p->excl_starts[d + 1] - e_lo;
    int64_t target, chunk_start = s_begin, current = 0;
    if (!plan_target(p, &target)) return 0;
    for (int64_t i = s_begin; i < s_end; i++) {
        current += off[i + 1] - off[i];
        if (i != s_end - 1 && current < target) continue;
        const int64_t n_chunk = i + 1 - chunk_start;
        int64_t a_end = 1, label = 0;
        if (n_chunk >= 2 && !mt_randint(&p->rng, 1, n_chunk - 1, &a_end)) return 0;
        int64_t v[4] = {off[chunk_start], off[chunk_start + a_end], 0, 0};
        int want_random = n_chunk == 1 || mt_random(&p->rng) < 0.5;
        if (want_random && p->n_neg_docs - n_excl < 1) {
            if (n_chunk == 1) {
                p->unavailable++;
                chunk_start = i + 1;
                current = 0;
                continue;
            }
            want_random = 0; /* no other document: keep the true continuation */
            p->kept++;
        }
        if (want_random) {
            if (!plan_random_b(p, p->excl + e_lo, n_excl, target - (v[1] - v[0]), v)) return 0;
            i -= n_chunk - a_end; /* put the unused sentences back */
            label = 1;
            p->random_next++;
            p->single += n_chunk == 1;
        } else {
            v[2] = v[1];
            v[3] = off[i + 1];
        }
        if (!plan_emit(p, v, label)) return 0;
        chunk_start = i + 1;
        current = 0;
    }
    return 1;
}

/* _PassPlanner.sop_document */
static int plan_sop(Planner *p, Py_ssize_t d) {
    const int64_t *off = p->off, s_begin = p->doc_starts[d], s_end = p->doc_starts[d + 1];
    int64_t target, chunk_start = s_begin, current = 0;
    if (!plan_target(p, &target)) return 0;
    for (int64_t i = s_begin; i < s_end; i++) {
        current += off[i + 1] - off[i];
        if (i != s_end - 1 && current < target) continue;
        const int64_t n_chunk = i + 1 - chunk_start;
        if (n_chunk < 2) {
            p->unavailable++;
        } else {
            int64_t a_end;
            if (!mt_randint(&p->rng, 1, n_chunk - 1, &a_end)) return 0;
            const int64_t first_lo = off[chunk_start], first_hi = off[chunk_start + a_end], second_hi = off[i + 1];
            const int swap = mt_random(&p->rng) < 0.5;
            int64_t v[4] = {first_lo, first_hi, first_hi, second_hi};
            if (swap) {
                v[0] = first_hi, v[1] = second_hi, v[2] = first_lo, v[3] = first_hi;
            }
            if (!plan_emit(p, v, swap)) return 0;
        }
        chunk_start = i + 1;
        current = 0;
    }
    return 1;
}

#define PLAN_LIMIT ((int64_t)1 << 60) /* offsets and lengths below this: no sum of them overflows */

/* Whether `starts` (n + 1 of them) ascend from >= 0 to at most `last`, and `off` (when given,
 * `count` of them) ascend within [0, PLAN_LIMIT] */
static int plan_ascending(const int64_t *starts, Py_ssize_t n, int64_t last, const int64_t *off, Py_ssize_t count) {
    if (starts[0] < 0 || starts[n] > last) return 0;
    for (Py_ssize_t d = 0; d < n; d++)
        if (starts[d + 1] < starts[d]) return 0;
    for (Py_ssize_t s = 0; off && s < count; s++)
        if (off[s] < 0 || off[s] > PLAN_LIMIT || (s && off[s] < off[s - 1])) return 0;
    return 1;
}

/* The state tuple of random.Random.getstate()[1] into g; 0 and an error if it is not one */
static int mt_from_tuple(PyObject *state, MT *g) {
    if (!PyTuple_Check(state) || PyTuple_GET_SIZE(state) != MT_N + 1) {
        PyErr_SetString(PyExc_ValueError, "plan_pairs: the state is a tuple of 625 ints");
        return 0;
    }
    for (int i = 0; i < MT_N; i++) {
        const unsigned long word = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(state, i));
        if (word == (unsigned long)-1 && PyErr_Occurred()) return 0;
        g->state[i] = (uint32_t)word;
    }
    const long index = PyLong_AsLong(PyTuple_GET_ITEM(state, MT_N));
    if (index == -1 && PyErr_Occurred()) return 0;
    if (index < 0 || index > MT_N) {
        PyErr_SetString(PyExc_ValueError, "plan_pairs: invalid state");
        return 0;
    }
    g->index = (int)index;
    return 1;
}

static PyObject *mt_to_tuple(const MT *g) {
    PyObject *state = PyTuple_New(MT_N + 1);
    if (!state) return NULL;
    for (int i = 0; i <= MT_N; i++) {
        PyObject *item = i < MT_N ? PyLong_FromUnsignedLong(g->state[i]) : PyLong_FromLong(g->index);
        if (!item) {
            Py_DECREF(state);
            return NULL;
        }
        PyTuple_SET_ITEM(state, i, item);
    }
    return state;
}

/* plan_pairs(state, sop, max_num_tokens, short_seq_prob, min_short_seq_length, off, doc_starts,
 *            neg_off, neg_starts, base, excl_starts, excl, a_lo, a_hi, b_lo, b_hi, labels)
 *   -> None or (state, n, negatives_unavailable, random_next, single_sentence_chunks, continuations_kept)
 * bert_data.instances.plan_pairs for one pass, the same pairs and draws: `state` is
 * random.Random.getstate()[1], the state after the pass is returned (for setstate). The unit's
 * sentence offsets `off` and its documents' first sentences `doc_starts` (n_docs + 1); NSP's
 * negatives the same (`neg_off`, `neg_starts`), their tokens at `base` + offset, unit document
 * d barred from negatives excl[excl_starts[d] .. excl_starts[d + 1]) (all int64). The pairs go
 * to the int64 outputs (`n` of them are written; one per sentence of the unit is room enough).
 * None (the state and outputs unused) when the inputs are not a plan this reproduces (offsets
 * that do not ascend, documents outside them, an empty range Python's randint would refuse, a
 * max_num_tokens below 1, a truncation of 2**31 bits or more): the caller runs Python's planner,
 * which says what is wrong. */
static PyObject *plan_pairs(PyObject *self, PyObject *args) {
    PyObject *state, *o[11];
    int sop;
    long long max_num_tokens, min_short, base;
    double short_seq_prob;
    if (!PyArg_ParseTuple(args, "OpLdLOOOOLOOOOOOO", &state, &sop, &max_num_tokens, &short_seq_prob, &min_short, &o[0],
                          &o[1], &o[2], &o[3], &base, &o[4], &o[5], &o[6], &o[7], &o[8], &o[9], &o[10]))
        return NULL;
    Planner p;
    memset(&p, 0, sizeof p);
    if (!mt_from_tuple(state, &p.rng)) return NULL;
    Py_buffer v[11];
    Py_ssize_t count[11];
    int nv = 0;
    PyObject *result = NULL;
    for (; nv < 11; nv++)
        if (!any_vector(o[nv], &v[nv], nv >= 6, 'q', 8, 0, 0, &count[nv], "plan_pairs")) goto done;
    p.max_num_tokens = max_num_tokens, p.min_short = min_short, p.short_seq_prob = short_seq_prob, p.base = base;
    p.off = v[0].buf, p.doc_starts = v[1].buf, p.neg_off = v[2].buf, p.neg_starts = v[3].buf;
    p.excl_starts = v[4].buf, p.excl = v[5].buf;
    p.n_docs = count[1] - 1, p.n_neg_docs = count[3] - 1, p.capacity = count[6];
    for (int f = 0; f < 5; f++) p.out[f] = v[6 + f].buf;
    int ok = count[0] >= 1 && count[2] >= 1 && p.n_docs >= 0 && p.n_neg_docs >= 0 && count[4] == count[1]
             && max_num_tokens >= 1 && max_num_tokens <= PLAN_LIMIT && min_short >= -PLAN_LIMIT
             && base >= -PLAN_LIMIT && base <= PLAN_LIMIT;
    for (int f = 7; ok && f < 11; f++) ok = count[f] == p.capacity;
    ok = ok && plan_ascending(p.doc_starts, p.n_docs, count[0] - 1, p.off, count[0])
         && plan_ascending(p.neg_starts, p.n_neg_docs, count[2] - 1, p.neg_off, count[2])
         && plan_ascending(p.excl_starts, p.n_docs, count[5], NULL, 0);
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t d = 0; d < p.n_docs && ok; d++) ok = sop ? plan_sop(&p, d) : plan_nsp(&p, d);
        Py_END_ALLOW_THREADS
    }
    if (!ok) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    PyObject *new_state = mt_to_tuple(&p.rng);
    if (new_state)
        result = Py_BuildValue("(NnLLLL)", new_state, p.n, (long long)p.unavailable, (long long)p.random_next,
                               (long long)p.single, (long long)p.kept);
done:
    release_all(v, nv);
    return result;
}

/* mt_draws(state, kinds, args) -> (state, values): random.Random's draws on `state` one after the
 * other, for the tests of this generator alone: kind 0 random(), 1 randint(a, b) (args a, b),
 * 2 getrandbits(k) for k <= 64 (arg k), 3 the one bits of getrandbits(k) (arg k); values are
 * floats or ints; None for a draw Python would refuse. */
static PyObject *mt_draws(PyObject *self, PyObject *args) {
    PyObject *state, *kinds, *params;
    if (!PyArg_ParseTuple(args, "OOO", &state, &kinds, &params)) return NULL;
    MT g;
    if (!mt_from_tuple(state, &g)) return NULL;
    kinds = PySequence_Fast(kinds, "mt_draws: kinds");
    if (!kinds) return NULL;
    params = PySequence_Fast(params, "mt_draws: args");
    PyObject *values = params ? PyList_New(0) : NULL, *result = NULL;
    if (!values) goto done;
    Py_ssize_t next = 0;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(kinds); i++) {
        const long kind = PyLong_AsLong(PySequence_Fast_GET_ITEM(kinds, i));
        const int wants = kind == 1 ? 2 : kind == 0 ? 0 : 1;
        long long a[2] = {0, 0};
        if (kind == -1 && PyErr_Occurred()) goto done;
        if (kind < 0 || kind > 3 || next + wants > PySequence_Fast_GET_SIZE(params)) {
            PyErr_SetString(PyExc_ValueError, "mt_draws: kinds 0..3 and their args");
            goto done;
        }
        for (int j = 0; j < wants; j++) {
            a[j] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(params, next++));
            if (a[j] == -1 && PyErr_Occurred()) goto done;
        }
        int64_t out;
        PyObject *value = NULL;
        if (kind == 0) value = PyFloat_FromDouble(mt_random(&g));
        else if (kind == 1) value = mt_randint(&g, a[0], a[1], &out) ? PyLong_FromLongLong(out) : (Py_INCREF(Py_None), Py_None);
        else if (kind == 2) value = a[0] < 0 || a[0] > 64 ? (Py_INCREF(Py_None), Py_None) : PyLong_FromUnsignedLongLong(mt_bits(&g, (int)a[0]));
        else value = a[0] < 0 ? (Py_INCREF(Py_None), Py_None) : PyLong_FromLongLong(mt_popcount_bits(&g, a[0]));
        if (!value || PyList_Append(values, value) < 0) {
            Py_XDECREF(value);
            goto done;
        }
        Py_DECREF(value);
    }
    PyObject *new_state = mt_to_tuple(&g);
    if (new_state) result = Py_BuildValue("(NO)", new_state, values);
done:
    Py_XDECREF(values);
    Py_DECREF(kinds);
    Py_XDECREF(params);
    return result;
}

/* use_simd_varints(on) -> bool: the SSSE3 varint blocks of the write path on or off (tests compare
 * both routes' bytes); True only where they are built and the CPU has SSSE3. Returns the previous. */
static PyObject *use_simd_varints(PyObject *self, PyObject *arg) {
    const int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    const int previous = simd_varints;
#if HAVE_SIMD_VARINTS
    simd_varints = on && __builtin_cpu_supports("ssse3");
#endif
    return PyBool_FromLong(previous);
}

static PyObject *crc32c_py(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (!get_buffer(arg, &view, 0, 0, "data")) return NULL;
    uint32_t c = crc32c((const uint8_t *)view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

/* ---- Parquet pages (bert_data.format.parquet) ------------------------------------------------ */

static unsigned char *put_run(unsigned char *out, uint64_t count, unsigned char value) {
    out = put_varint(out, count << 1);
    *out++ = value;
    return out;
}

static int bytes_for(uint64_t v) { return v == 0 ? 0 : v <= 0xFF ? 1 : v <= 0xFFFF ? 2 : v <= 0xFFFFFF ? 3 : 4; }

/* The values x[1..n) as the blocks of DELTA_BINARY_PACKED (the caller writes the header and x[0]):
 * deltas of INT32 values wrap modulo 2**32, as Parquet's readers add them back; each block of 128:
 * its least delta, 4 miniblock widths in whole bytes (a miniblock past the deltas: 0), each needed
 * miniblock's 32 values (delta - least, modulo 2**32; 0 past the deltas) in that many bytes. */
static unsigned char *put_delta_blocks(unsigned char *out, const int32_t *x, int64_t n) {
    int32_t d[128];
    for (int64_t start = 1; start < n; start += 128) {
        const int k = n - start < 128 ? (int)(n - start) : 128;
        for (int i = 0; i < k; i++) d[i] = (int32_t)((uint32_t)x[start + i] - (uint32_t)x[start + i - 1]);
        int32_t least = d[0];
        for (int i = 1; i < k; i++) least = d[i] < least ? d[i] : least;
        out = put_varint(out, ((uint64_t)(int64_t)least << 1) ^ (uint64_t)((int64_t)least >> 63));
        uint32_t a[128];
        int width[4];
        for (int b = 0; b < 4; b++) {
            uint32_t top = 0;
            for (int i = b * 32; i < b * 32 + 32; i++) {
                a[i] = i < k ? (uint32_t)d[i] - (uint32_t)least : 0;
                top |= a[i];
            }
            width[b] = b * 32 < k ? bytes_for(top) : 0;
            *out++ = (unsigned char)(width[b] * 8);
        }
        for (int b = 0; b < 4; b++) {
            const uint32_t *y = a + b * 32;
            const int w = width[b];
            if (w == 1) {
                for (int i = 0; i < 32; i++) out[i] = (unsigned char)y[i];
            } else if (w == 2) {
                for (int i = 0; i < 32; i++) { out[2 * i] = (unsigned char)y[i]; out[2 * i + 1] = (unsigned char)(y[i] >> 8); }
            } else {
                for (int i = 0; i < 32 * (w > 0); i++)
                    for (int byte = 0; byte < w; byte++) out[w * i + byte] = (unsigned char)(y[i] >> (8 * byte));
            }
            out += 32 * w;
        }
    }
    return out;
}

/* Rows `rows`' first counts[r] values of `values` (rows of `width`, type T) back to back into the
 * int32 vector `into`; `bad` set when one is outside low..high (within int32: Parquet's INT32). */
#define GATHER_ROWS(T, values, width, counts, rows, m, low, high, into, bad) do { \
        int64_t p_ = 0; T least_ = 0, most_ = 0; int any_ = 0; \
        for (Py_ssize_t j_ = 0; j_ < (m); j_++) { \
            const T *x_ = (const T *)(values) + (rows)[j_] * (width); \
            const int64_t c_ = (counts)[(rows)[j_]]; \
            if (c_ && !any_) { least_ = most_ = x_[0]; any_ = 1; } \
            for (int64_t t_ = 0; t_ < c_; t_++) { \
                const T x = x_[t_]; \
                least_ = x < least_ ? x : least_; most_ = x > most_ ? x : most_; \
                (into)[p_ + t_] = (int32_t)x; \
            } \
            p_ += c_; \
        } \
        (bad) = any_ && ((int64_t)least_ < (low) || (int64_t)most_ > (high)); } while (0)

/* parquet_page(values, width, counts, rows, levels, low, high) -> (bytes, levels) or None: the data
 * page v1 payload of rows `rows` (int64 indices, in order) of `values` (C-contiguous int32 or int64,
 * rows of `width`), each row's first counts[r] values (int64 counts): with `levels`, the repetition
 * and definition levels as RLE runs (bert_data.format.parquet._level_runs), then the values as
 * DELTA_BINARY_PACKED (_delta_binary_packed): the same bytes as the numpy path. None when a row's
 * count is outside 0..width, a value past it is not 0, or a value is outside low..high: the numpy
 * path then names the problem. */
static PyObject *parquet_page(PyObject *self, PyObject *args) {
    PyObject *o[3];
    Py_ssize_t width;
    int levels;
    long long low, high;
    if (!PyArg_ParseTuple(args, "OnOOpLL", &o[0], &width, &o[1], &o[2], &levels, &low, &high)) return NULL;
    Py_buffer v[3];
    Py_ssize_t count[3];
    if (!any_vector(o[0], &v[0], 0, 'i', 4, 'q', 8, &count[0], "parquet_page")) return NULL;
    if (!any_vector(o[1], &v[1], 0, 'q', 8, 0, 0, &count[1], "parquet_page")) { PyBuffer_Release(&v[0]); return NULL; }
    if (!any_vector(o[2], &v[2], 0, 'q', 8, 0, 0, &count[2], "parquet_page")) {
        PyBuffer_Release(&v[0]); PyBuffer_Release(&v[1]); return NULL;
    }
    PyObject *result = NULL;
    unsigned char *buf = NULL;
    if (width < 1 || count[0] != count[1] * width) {
        PyErr_SetString(PyExc_ValueError, "parquet_page: values must hold len(counts) rows of width");
        goto done;
    }
    const int wide = v[0].itemsize == 8;
    const int64_t *counts = v[1].buf, *rows = v[2].buf;
    const Py_ssize_t m = count[2];
    int64_t total = 0, slots = 0, empty = 0;
    int64_t padding = 0; /* the OR of every value past a row's count: 0 when the padding is */
    for (Py_ssize_t j = 0; j < m; j++) {
        const int64_t r = rows[j];
        if (r < 0 || r >= count[1]) { PyErr_SetString(PyExc_IndexError, "parquet_page: a row index is out of range"); goto done; }
        const int64_t c = counts[r];
        if (c < 0 || c > width) { result = Py_None; Py_INCREF(result); goto done; }
        if (wide) { const int64_t *x = (const int64_t *)v[0].buf + r * width; for (Py_ssize_t t = c; t < width; t++) padding |= x[t]; }
        else { const int32_t *x = (const int32_t *)v[0].buf + r * width; for (Py_ssize_t t = c; t < width; t++) padding |= x[t]; }
        total += c;
        slots += c ? c : 1;
        empty += c == 0;
    }
    if (padding) { result = Py_None; Py_INCREF(result); goto done; }
    /* room for the levels (2 runs a row), the deltas (4 bytes a value, 16 a block) and, at the end, the
     * values gathered as int64: the deltas written never reach values not yet read */
    const size_t cap = (size_t)m * 32 + (size_t)total * 4 + ((size_t)total / 128 + 1) * 16 + 128 + (size_t)total * 4;
    buf = PyMem_Malloc(cap);
    if (!buf) { PyErr_NoMemory(); goto done; }
    unsigned char *out = buf;
    if (levels) {
        unsigned char *length_at = out;
        out += 4;
        for (Py_ssize_t j = 0; j < m; j++) {
            const int64_t c = counts[rows[j]];
            out = put_run(out, 1, 0);
            if (c > 1) out = put_run(out, (uint64_t)(c - 1), 1);
        }
        uint32_t n = (uint32_t)(out - length_at - 4);
        memcpy(length_at, &n, 4); /* little-endian hosts only (see PyInit__wire) */
        length_at = out;
        out += 4;
        if (m && !empty) {
            out = put_run(out, (uint64_t)total, 2);
        } else {
            for (Py_ssize_t j = 0; j < m; j++) {
                const int64_t c = counts[rows[j]];
                out = c ? put_run(out, (uint64_t)c, 2) : put_run(out, 1, 0);
            }
        }
        n = (uint32_t)(out - length_at - 4);
        memcpy(length_at, &n, 4);
    }
    int bad = 0;
    if (low < INT32_MIN || high > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "parquet_page: low..high must be within int32");
        goto done;
    }
    int32_t *gathered = (int32_t *)(buf + cap - (size_t)total * 4); /* the end of the buffer, ahead of what is written */
    if (wide) GATHER_ROWS(int64_t, v[0].buf, width, counts, rows, m, low, high, gathered, bad);
    else GATHER_ROWS(int32_t, v[0].buf, width, counts, rows, m, low, high, gathered, bad);
    if (bad) { result = Py_None; Py_INCREF(result); goto done; }
    out = put_varint(out, 128);
    out = put_varint(out, 4);
    out = put_varint(out, (uint64_t)total);
    if (total == 0) {
        *out++ = 0; /* no value: the first value is 0 */
    } else {
        out = put_varint(out, ((uint64_t)(int64_t)gathered[0] << 1) ^ (uint64_t)((int64_t)gathered[0] >> 63));
        out = put_delta_blocks(out, gathered, total);
    }
    PyObject *data = PyBytes_FromStringAndSize((const char *)buf, out - buf);
    if (data) result = Py_BuildValue("(NL)", data, (long long)slots);
done:
    PyMem_Free(buf);
    PyBuffer_Release(&v[0]);
    PyBuffer_Release(&v[1]);
    PyBuffer_Release(&v[2]);
    return result;
}

/* ---- MDS samples (bert_data.format.mds) ------------------------------------------------------ */

#define MDS_MAX_COLUMNS 8

typedef struct {
    Py_buffer values, counts;
    Py_ssize_t width;
    int variable, item, wide;
    long long low, high;
} MdsColumn;

/* Column c's encoded bytes in row r's sample (a 1-D ndarray: its shape header and values). */
static Py_ssize_t mds_size(const MdsColumn *c, int64_t r) {
    const int64_t n = ((const int64_t *)c->counts.buf)[r];
    return (Py_ssize_t)n * c->item + (c->variable ? 1 + (n < 256 ? 1 : n < 65536 ? 2 : 4) : 0);
}

/* Whether row r of column c fits an MDS sample (1..width values for an ndarray column, one for a
 * scalar; each within low..high; the padding 0). */
static int mds_row_fits(const MdsColumn *c, int64_t r) {
    const int64_t n = ((const int64_t *)c->counts.buf)[r];
    if (n < 1 || n > c->width || (!c->variable && n != 1)) return 0;
    int bad = 0;
    if (c->wide) {
        const int64_t *x = (const int64_t *)c->values.buf + r * c->width;
        for (int64_t t = 0; t < n; t++) bad |= x[t] < c->low || x[t] > c->high;
        for (Py_ssize_t t = n; t < c->width; t++) bad |= x[t] != 0;
    } else {
        const int32_t *x = (const int32_t *)c->values.buf + r * c->width;
        for (int64_t t = 0; t < n; t++) bad |= x[t] < c->low || x[t] > c->high;
        for (Py_ssize_t t = n; t < c->width; t++) bad |= x[t] != 0;
    }
    return !bad;
}

/* Column c's bytes of row r at p (NDArray's encoding of a 1-D array: one byte 1 << 2 | code, the
 * length as uint8, uint16 or uint32 (code 0, 1, 2), the values; a scalar: its value). */
static uint8_t *mds_put_column(const MdsColumn *c, int64_t r, uint8_t *p) {
    const int64_t n = ((const int64_t *)c->counts.buf)[r];
    if (c->variable) {
        const int code = n < 256 ? 0 : n < 65536 ? 1 : 2;
        *p++ = (uint8_t)((1 << 2) | code);
        const uint32_t length = (uint32_t)n;
        memcpy(p, &length, (size_t)1 << code); /* little-endian (see PyInit__wire) */
        p += (size_t)1 << code;
    }
    for (int64_t t = 0; t < n; t++) {
        const int64_t x = c->wide ? ((const int64_t *)c->values.buf)[r * c->width + t]
                                  : ((const int32_t *)c->values.buf)[r * c->width + t];
        if (c->item == 4) { const int32_t v = (int32_t)x; memcpy(p, &v, 4); }
        else if (c->item == 2) { const int16_t v = (int16_t)x; memcpy(p, &v, 2); }
        else *p = (uint8_t)(int8_t)x;
        p += c->item;
    }
    return p;
}

/* mds_shard_frames' columns: (values, width, counts, variable, item, low, high) in the MDS writer's
 * column order: values C-contiguous int32 or int64 rows of `width`, counts int64 (each row's
 * values: its prefix), item the stored bytes a value (1, 2 or 4). A row's sample is
 * bert_data.format.mds.encode_samples' bytes: the uint32 byte size of each ndarray column, then
 * every column in order. A row does not fit when it holds an empty array (which MDS refuses), a
 * value outside low..high or padding that is not 0: the numpy path then says why. */
/* The columns (views released by the caller: *got of them); the batch's rows into *nrows. */
static int mds_columns(PyObject *seq, MdsColumn *cols, int *got, Py_ssize_t *nrows, const char *what) {
    Py_ssize_t count;
    const Py_ssize_t nc = PySequence_Fast_GET_SIZE(seq);
    if (nc < 1 || nc > MDS_MAX_COLUMNS) { PyErr_Format(PyExc_ValueError, "%s: 1 to 8 columns", what); return 0; }
    for (Py_ssize_t i = 0; i < nc; i++) {
        MdsColumn *c = &cols[i];
        PyObject *values, *counts;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "OnOpiLL", &values, &c->width, &counts, &c->variable,
                              &c->item, &c->low, &c->high)) return 0;
        if (!any_vector(values, &c->values, 0, 'i', 4, 'q', 8, &count, what)) return 0;
        if (!any_vector(counts, &c->counts, 0, 'q', 8, 0, 0, nrows, what)) { PyBuffer_Release(&c->values); return 0; }
        (*got)++;
        c->wide = c->values.itemsize == 8;
        if (c->width < 1 || count != *nrows * c->width || (c->item != 1 && c->item != 2 && c->item != 4)) {
            PyErr_Format(PyExc_ValueError, "%s: a column's values must hold len(counts) rows of width; item 1, 2 or 4", what);
            return 0;
        }
        if (i && *nrows != cols[0].counts.len / 8) { PyErr_Format(PyExc_ValueError, "%s: columns of different rows", what); return 0; }
    }
    return 1;
}

/* Row r's frame's bytes (16 + its sample's), or 0 when a column declines the row. */
static Py_ssize_t mds_frame_size(const MdsColumn *cols, Py_ssize_t nc, int variables, int64_t r) {
    Py_ssize_t payload = 4 * variables;
    for (Py_ssize_t i = 0; i < nc; i++) {
        if (!mds_row_fits(&cols[i], r)) return 0;
        payload += mds_size(&cols[i], r);
    }
    return 16 + payload;
}

/* Row r's sample in its TFRecord frame at p; returns the frame's end. */
static uint8_t *mds_put_frame(const MdsColumn *cols, Py_ssize_t nc, int variables, int64_t r, uint8_t *p) {
    uint8_t *frame = p, *payload = p + 12, *q = payload + 4 * variables;
    for (Py_ssize_t i = 0, v = 0; i < nc; i++) {
        if (cols[i].variable) { const uint32_t s = (uint32_t)mds_size(&cols[i], r); memcpy(payload + 4 * v++, &s, 4); }
        q = mds_put_column(&cols[i], r, q);
    }
    const uint64_t length = (uint64_t)(q - payload);
    memcpy(frame, &length, 8);
    uint32_t crc = masked(crc32c(frame, 8));
    memcpy(frame + 8, &crc, 4);
    crc = masked(crc32c(payload, (size_t)length));
    memcpy(q, &crc, 4);
    return q + 4;
}

/* mds_shard_frames(columns, shard_of_row, num_shards) -> list or None: for each shard s in
 * [0, num_shards), the TFRecord frames of the MDS samples of the rows r with shard_of_row[r] == s
 * (int64, one per row), in row order, as one bytes (b"" for a shard without rows); None when a row
 * does not fit. The rows are read in batch order, each frame written at its place in its shard's
 * bytes (sized exactly first): one shard's rows at a time jumps from row to row (see
 * serialize_shard_runs). */
static PyObject *mds_shard_frames(PyObject *self, PyObject *args) {
    PyObject *columns_arg, *shards_arg;
    Py_ssize_t num_shards;
    if (!PyArg_ParseTuple(args, "OOn", &columns_arg, &shards_arg, &num_shards)) return NULL;
    PyObject *seq = PySequence_Fast(columns_arg, "mds_shard_frames: columns must be a sequence");
    if (!seq) return NULL;
    MdsColumn cols[MDS_MAX_COLUMNS];
    int got = 0, have_shards = 0;
    Py_buffer shards_view;
    Py_ssize_t nrows = 0, count;
    Py_ssize_t *used = NULL;
    PyObject *result = NULL;
    const Py_ssize_t nc = PySequence_Fast_GET_SIZE(seq);
    if (!mds_columns(seq, cols, &got, &nrows, "mds_shard_frames")) goto done;
    if (num_shards < 1) { PyErr_SetString(PyExc_ValueError, "mds_shard_frames: num_shards must be at least 1"); goto done; }
    if (!any_vector(shards_arg, &shards_view, 0, 'q', 8, 0, 0, &count, "mds_shard_frames")) goto done;
    have_shards = 1;
    if (count != nrows) { PyErr_SetString(PyExc_ValueError, "mds_shard_frames: one shard per row"); goto done; }
    const int64_t *shard = shards_view.buf;
    int variables = 0;
    for (Py_ssize_t i = 0; i < nc; i++) variables += cols[i].variable;
    used = PyMem_Calloc((size_t)num_shards, sizeof(Py_ssize_t)); /* first each shard's bytes */
    if (!used) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t r = 0; r < nrows; r++) {
        if (shard[r] < 0 || shard[r] >= num_shards) { PyErr_SetString(PyExc_IndexError, "mds_shard_frames: a shard out of range"); goto done; }
        const Py_ssize_t size = mds_frame_size(cols, nc, variables, r);
        if (!size) { result = Py_None; Py_INCREF(result); goto done; }
        used[shard[r]] += size;
    }
    result = PyList_New(num_shards);
    if (!result) goto done;
    for (Py_ssize_t s = 0; s < num_shards; s++) {
        PyObject *run = PyBytes_FromStringAndSize(NULL, used[s]);
        if (!run) { Py_CLEAR(result); goto done; }
        PyList_SET_ITEM(result, s, run);
        used[s] = 0; /* from here, the bytes written */
    }
    for (Py_ssize_t r = 0; r < nrows; r++) {
        uint8_t *p = (uint8_t *)PyBytes_AS_STRING(PyList_GET_ITEM(result, shard[r])) + used[shard[r]];
        used[shard[r]] += mds_put_frame(cols, nc, variables, r, p) - p;
    }
done:
    PyMem_Free(used);
    for (int i = 0; i < got; i++) { PyBuffer_Release(&cols[i].values); PyBuffer_Release(&cols[i].counts); }
    if (have_shards) PyBuffer_Release(&shards_view);
    Py_DECREF(seq);
    return result;
}

/* nvidia_run(arrays, rows) -> bytes or None: one TFRecord frame holding rows `rows` (int64 indices,
 * in order) of a batch of packed NSP/SOP rows as NVIDIA's samples, the bytes of
 * bert_data.format.nvidia_hdf5._run_payload(_flat_samples(those rows)): "NVH5", the rows (uint64),
 * each dataset's sample lengths (uint32: input_ids, segment_ids, packed_input_len,
 * masked_lm_positions, masked_lm_ids, packed_masked_lm_len, next_sentence_labels), then the
 * values (int16 input_ids, packed_input_len, masked_lm_positions, masked_lm_ids,
 * packed_masked_lm_len; int8 segment_ids, next_sentence_labels). arrays: input_ids, input_mask,
 * segment_ids, positions (rows x L), masked_lm_positions, masked_lm_ids (rows x P), int32 or int64;
 * masked_lm_weights (rows x P, float32 or float64); next_sentence_positions, next_sentence_labels
 * (rows x K, int32 or int64), next_sentence_weights (rows x K, float32 or float64); then L, P, K.
 * None when a row is not one the layout holds exactly (every check of _check_rows and
 * _not_read_back): the numpy path then says why. */
#define NV_SLOTS 3
typedef struct { Py_buffer v; int wide, real; } NvArray;

static inline int64_t nv_int(const NvArray *a, Py_ssize_t i) {
    return a->wide ? ((const int64_t *)a->v.buf)[i] : ((const int32_t *)a->v.buf)[i];
}
static inline double nv_real(const NvArray *a, Py_ssize_t i) {
    return a->wide ? ((const double *)a->v.buf)[i] : (double)((const float *)a->v.buf)[i];
}

/* One row's checks; its tokens, predictions, depth and per-instance counts. 0 when it fails one.
 * (Ten parameters: the row's arrays and widths in, its five counts out; a struct would only rename them.) */
static int nv_row(NvArray *a, Py_ssize_t r, Py_ssize_t L, Py_ssize_t P, Py_ssize_t K, int64_t *tokens,
                  int64_t *preds, int64_t *depth, int64_t tok[NV_SLOTS], int64_t pred[NV_SLOTS]) {
    const Py_ssize_t base = r * L, pbase = r * P, kbase = r * K;
    int64_t d = 0, n = 0;
    tok[0] = tok[1] = tok[2] = 0;
    Py_ssize_t c = 0;
    for (; c < L; c++) {  /* input_mask: runs of 1, 2, 3 (each step up by one), then 0 */
        const int64_t m = nv_int(&a[1], base + c);
        if (m == 0) break;
        if (m != d && m != d + 1) return 0;  /* (also a negative value, and one past 3: d + 1 <= 3 below) */
        if (m > NV_SLOTS) return 0;
        d = m; tok[m - 1]++; n++;
    }
    for (; c < L; c++)  /* padding: every feature 0 there */
        if (nv_int(&a[1], base + c) || nv_int(&a[0], base + c) || nv_int(&a[2], base + c) || nv_int(&a[3], base + c)) return 0;
    if (d < 1 || d > K) return 0;
    int64_t start = 0, inst = 1;
    for (Py_ssize_t c = 0; c < n; c++) {  /* real tokens: positions within the instance, ids, segments */
        const int64_t m = nv_int(&a[1], base + c);
        if (m != inst) { start = c; inst = m; }
        if (nv_int(&a[3], base + c) != c - start) return 0;
        const int64_t id = nv_int(&a[0], base + c);
        if (id > 32767 || id < -32768) return 0;
        const int64_t seg = nv_int(&a[2], base + c);
        if (seg != 0 && seg != 1) return 0;
    }
    int64_t p = 0;
    pred[0] = pred[1] = pred[2] = 0;
    int64_t slot = 1, ended = 0;
    for (Py_ssize_t c = 0; c < P; c++) {  /* masked_lm_weights: 1.0.. 2.0.. 3.0.. then 0.0, within the row's instances */
        const double w = nv_real(&a[6], pbase + c);
        const int64_t pos = nv_int(&a[4], pbase + c), id = nv_int(&a[5], pbase + c);
        if (pos < -32768 || pos > 32767 || id < -32768 || id > 32767) return 0;
        if (ended || w == 0.0) {
            if (w != 0.0 || pos != 0 || id != 0) return 0;
            ended = 1;
            continue;
        }
        int64_t s;
        if (w == 1.0) s = 1; else if (w == 2.0) s = 2; else if (w == 3.0) s = 3; else return 0;
        if (s < slot || s > d) return 0;
        slot = s;
        if (id == 0) return 0;  /* NVIDIA's loss skips label 0 */
        pred[s - 1]++;
        p++;
    }
    int64_t first = 0;
    for (Py_ssize_t j = 0; j < K; j++) {  /* next_sentence_*: the instances' first tokens, labels 0/1, weights 1.0 */
        const int used = j < d;
        const int64_t label = nv_int(&a[8], kbase + j);
        if (label != 0 && label != 1) return 0;
        if (!used && label != 0) return 0;
        if (nv_int(&a[7], kbase + j) != (used ? first : 0)) return 0;
        if (nv_real(&a[9], kbase + j) != (used ? 1.0 : 0.0)) return 0;
        if (used && j < NV_SLOTS) first += tok[j];
    }
    *tokens = n; *preds = p; *depth = d;
    return 1;
}

static PyObject *nvidia_run(PyObject *self, PyObject *args) {
    PyObject *o[10], *rows_arg;
    Py_ssize_t L, P, K;
    if (!PyArg_ParseTuple(args, "(OOOOOOOOOO)nnnO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7], &o[8], &o[9],
                          &L, &P, &K, &rows_arg)) return NULL;
    NvArray a[10];
    int got = 0, have_rows = 0;
    Py_buffer rows_view;
    Py_ssize_t count, nrows = -1;
    PyObject *result = NULL;
    int64_t *sizes = NULL;
    if (L < 1 || L > 32767 || P < 1 || K < 1) { result = Py_None; Py_INCREF(result); goto done; }
    for (int i = 0; i < 10; i++) {
        const int real = i == 6 || i == 9;
        if (!any_vector(o[i], &a[i].v, 0, real ? 'f' : 'i', 4, real ? 'd' : 'q', 8, &count, "nvidia_run")) goto done;
        got++;
        a[i].wide = a[i].v.itemsize == 8;
        a[i].real = real;
        const Py_ssize_t width = i < 4 ? L : i < 7 ? P : K;
        if (width ? count % width : count) { PyErr_SetString(PyExc_ValueError, "nvidia_run: an array is not rows of its width"); goto done; }
        const Py_ssize_t n = width ? count / width : 0;
        if (nrows < 0) nrows = n;
        else if (n != nrows) { PyErr_SetString(PyExc_ValueError, "nvidia_run: arrays of different rows"); goto done; }
    }
    if (!any_vector(rows_arg, &rows_view, 0, 'q', 8, 0, 0, &count, "nvidia_run")) goto done;
    have_rows = 1;
    const int64_t *rows = rows_view.buf;
    sizes = PyMem_Malloc(sizeof(int64_t) * (size_t)(count ? count : 1) * 9);
    if (!sizes) { PyErr_NoMemory(); goto done; }
    int64_t total[7] = {0, 0, 0, 0, 0, 0, 0};
    for (Py_ssize_t j = 0; j < count; j++) {
        if (rows[j] < 0 || rows[j] >= nrows) { PyErr_SetString(PyExc_IndexError, "nvidia_run: a row index is out of range"); goto done; }
        int64_t *s = sizes + 9 * j;  /* tokens, predictions, depth, tok[3], pred[3] */
        if (!nv_row(a, rows[j], L, P, K, &s[0], &s[1], &s[2], s + 3, s + 6)) { result = Py_None; Py_INCREF(result); goto done; }
        total[0] += s[0]; total[1] += s[0]; total[2] += s[2]; total[3] += s[1]; total[4] += s[1]; total[5] += s[2]; total[6] += s[2];
    }
    /* payload: magic, rows, 7 x rows lengths, then int16 values of 0, 2, 3, 4, 5 and int8 values of 1, 6 */
    const int64_t payload = 12 + 28 * (int64_t)count + 2 * (total[0] + total[2] + total[3] + total[4] + total[5]) + total[1] + total[6];
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(16 + payload));
    if (!result) goto done;
    uint8_t *frame = (uint8_t *)PyBytes_AS_STRING(result), *q = frame + 12;
    memcpy(q, "NVH5", 4);
    const uint64_t n64 = (uint64_t)count;
    memcpy(q + 4, &n64, 8);
    uint8_t *len = q + 12;
    static const int which[7] = {0, 0, 2, 1, 1, 2, 2};  /* each dataset's length: tokens, predictions or depth */
    for (int d = 0; d < 7; d++)
        for (Py_ssize_t j = 0; j < count; j++) { const uint32_t v = (uint32_t)sizes[9 * j + which[d]]; memcpy(len, &v, 4); len += 4; }
    uint8_t *p = len;
    for (Py_ssize_t j = 0; j < count; j++) {  /* input_ids */
        const Py_ssize_t base = rows[j] * L;
        for (int64_t c = 0; c < sizes[9 * j]; c++) { const int16_t v = (int16_t)nv_int(&a[0], base + c); memcpy(p, &v, 2); p += 2; }
    }
    for (Py_ssize_t j = 0; j < count; j++)  /* packed_input_len */
        for (int64_t s = 0; s < sizes[9 * j + 2]; s++) { const int16_t v = (int16_t)sizes[9 * j + 3 + s]; memcpy(p, &v, 2); p += 2; }
    for (int f = 4; f <= 5; f++)  /* masked_lm_positions, masked_lm_ids */
        for (Py_ssize_t j = 0; j < count; j++) {
            const Py_ssize_t base = rows[j] * P;
            for (int64_t c = 0; c < sizes[9 * j + 1]; c++) { const int16_t v = (int16_t)nv_int(&a[f], base + c); memcpy(p, &v, 2); p += 2; }
        }
    for (Py_ssize_t j = 0; j < count; j++)  /* packed_masked_lm_len */
        for (int64_t s = 0; s < sizes[9 * j + 2]; s++) { const int16_t v = (int16_t)sizes[9 * j + 6 + s]; memcpy(p, &v, 2); p += 2; }
    for (Py_ssize_t j = 0; j < count; j++) {  /* segment_ids */
        const Py_ssize_t base = rows[j] * L;
        for (int64_t c = 0; c < sizes[9 * j]; c++) *p++ = (uint8_t)(int8_t)nv_int(&a[2], base + c);
    }
    for (Py_ssize_t j = 0; j < count; j++) {  /* next_sentence_labels */
        const Py_ssize_t base = rows[j] * K;
        for (int64_t s = 0; s < sizes[9 * j + 2]; s++) *p++ = (uint8_t)(int8_t)nv_int(&a[8], base + s);
    }
    const uint64_t length = (uint64_t)payload;
    memcpy(frame, &length, 8);
    uint32_t crc = masked(crc32c(frame, 8));
    memcpy(frame + 8, &crc, 4);
    crc = masked(crc32c(q, (size_t)payload));
    memcpy(p, &crc, 4);
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(&a[i].v);
    if (have_rows) PyBuffer_Release(&rows_view);
    PyMem_Free(sizes);
    return result;
}

static PyMethodDef methods[] = {
    {"cut_frames", cut_frames, METH_VARARGS, "(data, starts_out, lengths_out) -> (count, end, bad)"},
    {"decode_fixed", decode_fixed, METH_VARARGS,
     "(data, starts, lengths, keys, kinds, counts, outs, ok_out, small) -> wide"},
    {"clean_rows", clean_rows, METH_VARARGS, "(arrays, params, kinds, real_out, pred_out) -> None or sums"},
    {"serialize_examples", serialize_examples, METH_VARARGS, "(arrays, prefixes, kinds) -> list of tf.train.Example bytes"},
    {"replace_rows_pcg64", replace_rows_pcg64, METH_VARARGS,
     "(n, L, width, p, mask_id, vocab_size, input_ids, k, words, positions, original, weights) -> bool"},
    {"serialize_shard_runs", serialize_shard_runs, METH_VARARGS,
     "(arrays, prefixes, kinds, shard_of_row, num_shards) -> list: each shard's framed records, in row order"},
    {"frame_records", frame_records, METH_O, "(payloads) -> bytes: their TFRecord frames"},
    {"assemble_pairs", assemble_pairs, METH_VARARGS,
     "(n, L, ids, a_lo, a_hi, b_lo, b_hi, cls, sep, input_ids, input_mask, segment_ids, candidates, real_length) -> ok"},
    {"assemble_windows", assemble_windows, METH_VARARGS,
     "(n, L, tokens, starts, lengths, cls, sep, separator, has_separator, input_ids, input_mask, candidates, "
     "real_length) -> ok"},
    {"choose_rows", choose_rows, METH_VARARGS,
     "(n, L, width, p, candidates, k, keys or BitGenerator capsule or PCG64 state words, positions) -> ok "
     "(False: a tie)"},
    {"replace_rows", replace_rows, METH_VARARGS,
     "(n, L, width, p, mask_id, input_ids, k, coin, random_ids, positions, original, weights) -> None"},
    {"mask_words", mask_words, METH_VARARGS,
     "(n, L, p, input_ids, candidates, is_continuation, k, capsule, vocab_size, mask_id, positions, original, used) "
     "-> ok"},
    {"pack_rows", pack_rows, METH_VARARGS,
     "(L, B, K, ids, segments, tok_start, lengths, npred, pred_start, mlm_pos, mlm_ids, labels, members, depths, "
     "input_ids, input_mask, positions, segment_ids, masked_lm_positions, masked_lm_ids, masked_lm_weights, "
     "next_sentence_positions, next_sentence_labels, next_sentence_weights) -> ok"},
    {"prefix_counts", prefix_counts, METH_VARARGS, "(values, width, counts) -> ok: each row's leading nonzero count"},
    {"gather_prefixes", gather_prefixes, METH_VARARGS, "(values, width, counts, out, at) -> ok: rows' prefixes back to back"},
    {"copy_ranges", copy_ranges, METH_VARARGS, "(src, starts, lengths, out, at) -> end: the byte ranges back to back"},
    {"best_fill", best_fill_c, METH_VARARGS, "(lengths, predictions, order, max_length, budget, K, members, depths) -> rows"},
    {"plan_pairs", plan_pairs, METH_VARARGS,
     "(state, sop, max_num_tokens, short_seq_prob, min_short_seq_length, off, doc_starts, neg_off, neg_starts, base, "
     "excl_starts, excl, a_lo, a_hi, b_lo, b_hi, labels) -> None or (state, n, negatives_unavailable, random_next, "
     "single_sentence_chunks, continuations_kept)"},
    {"mt_draws", mt_draws, METH_VARARGS, "(state, kinds, args) -> (state, values): random.Random's draws (tests)"},
    {"crc32c", crc32c_py, METH_O, "CRC32C of a bytes-like object"},
    {"mds_shard_frames", mds_shard_frames, METH_VARARGS,
     "(columns, shard_of_row, num_shards) -> list or None: each shard's rows as MDS samples in TFRecord frames"},
    {"parquet_page", parquet_page, METH_VARARGS,
     "(values, width, counts, rows, levels, low, high) -> (payload, levels) or None: a Parquet data page's levels and DELTA values"},
    {"nvidia_run", nvidia_run, METH_VARARGS,
     "((10 arrays), L, P, K, rows) -> bytes or None: one TFRecord frame of the rows' NVIDIA samples"},
    {"use_simd_varints", use_simd_varints, METH_O, "(on) -> previous: the SSSE3 varint blocks on or off (tests)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_wire", "bert_data's compiled TFRecord reading and writing loops", -1, methods};

PyMODINIT_FUNC PyInit__wire(void) {
    const uint16_t probe = 1;
    if (*(const uint8_t *)&probe != 1) {
        PyErr_SetString(PyExc_ImportError, "bert_data.format._wire assumes a little-endian machine");
        return NULL;
    }
    crc_choose();
    varints_choose();
    PyObject *m = PyModule_Create(&module);
    /* native.py binds the module only when API equals its WIRE_API: raise both together when
     * a function's arguments or results change, so that a stale build is never called */
    if (m && PyModule_AddIntConstant(m, "API", 16) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (m && PyModule_AddIntConstant(m, "PCG64", HAVE_PCG64) < 0) { /* choose_rows takes a PCG64's state */
        Py_DECREF(m);
        return NULL;
    }
    if (m && PyModule_AddStringConstant(m, "CRC32C", crc_name) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
