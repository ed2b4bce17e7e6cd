/* bert_data._wordpiece: BERT's tokenization of ASCII text, in one pass, in C.
 *
 * Optional accelerator of bert_data/tokenization.py (built by setup.py when a C compiler is
 * present, skipped otherwise). FullTokenizer._ascii_batch_ids uses it when it is built and keeps
 * its Python/`tokenizers` code as the reference and the fallback (tokenization._wordpiece None);
 * the tests hold the two to the same ids on random text and on the golden files.
 *
 * Vocab(tokens, unk_id, max_chars)
 *     `tokens`: the vocabulary's tokens as bytes (UTF-8), token i having id i; `unk_id` the id of
 *     [UNK]; `max_chars` the reference's max_input_chars_per_word. The tokens go into one open
 *     addressing hash table (FNV-1a, linear probing, at most half full: 16 bytes a slot plus the
 *     tokens' bytes, about 1.2 MB for BERT's 30,522 tokens). A duplicate token is a ValueError.
 *
 * Vocab.encode(texts, lower) -> (ids, offsets) or None
 *     `texts`: a sequence of str. None when one of them is not ASCII or holds a NUL (the caller
 *     takes its other routes). Otherwise `ids` is a bytearray of int32 (native order): every
 *     text's ids back to back, and `offsets` a bytearray of len(texts) + 1 int64 delimiting them.
 *     Per text, exactly google-research/bert's FullTokenizer on ASCII:
 *       BasicTokenizer: drop the control characters (0x01-0x08, 0x0b, 0x0c, 0x0e-0x1f, 0x7f;
 *         \t \n \r are whitespace), lowercase A-Z when `lower`, split on whitespace (space \t \n \r)
 *         and around each ASCII punctuation character (33-47, 58-64, 91-96, 123-126), which is a
 *         word of its own;
 *       WordpieceTokenizer: a word longer than `max_chars` is one [UNK]; otherwise greedy
 *         longest-match-first from the start of the word, the pieces after the first looked up
 *         with the "##" prefix, and the whole word is one [UNK] if some remainder has no prefix in
 *         the vocabulary.
 *     The lookups allocate nothing: the hashes of every prefix of a remainder are made in one
 *     forward pass (FNV-1a is computed byte by byte), then tried longest first, from the length
 *     of the longest token down. The GIL is released while the texts are tokenized.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define FNV_OFFSET 14695981039346656037ULL
#define FNV_PRIME 1099511628211ULL

typedef struct {
    uint32_t tag;  /* low 32 bits of the mixed hash: most mismatches end here */
    uint32_t off;  /* the token's bytes: pool[off .. off + len) */
    uint32_t len;
    int32_t id;    /* -1: an empty slot */
} Slot;

typedef struct {
    PyObject_HEAD
    Slot *slots;
    uint8_t *pool;
    uint64_t mask;      /* slot count - 1 (a power of two) */
    int shift;          /* 64 - log2(slot count) */
    int32_t unk_id;
    Py_ssize_t max_chars;
    size_t longest;     /* the longest token, in bytes */
    size_t longest_cont; /* the longest "##" token, without the "##" (0: none) */
    uint64_t hash_cont;  /* FNV-1a of "##" */
} Vocab;

static inline uint64_t fnv_step(uint64_t h, uint8_t c) { return (h ^ c) * FNV_PRIME; }

static inline uint64_t mix(uint64_t h) { return (h ^ (h >> 32)) * 0x9E3779B97F4A7C15ULL; }

/* The id of the token `prefix` + s[0:k] (prefix "##" when cont, else none), whose FNV-1a hash is h;
 * -1 when the vocabulary does not hold it. */
static inline int32_t lookup(const Vocab *v, uint64_t h, int cont, const uint8_t *s, size_t k) {
    uint64_t f = mix(h);
    uint64_t i = f >> v->shift;
    uint32_t tag = (uint32_t)f;
    size_t plen = cont ? 2 : 0;
    for (;;) {
        const Slot *e = &v->slots[i];
        if (e->id < 0) return -1;
        if (e->tag == tag && e->len == plen + k) {
            const uint8_t *t = v->pool + e->off;
            if ((!cont || (t[0] == '#' && t[1] == '#')) && memcmp(t + plen, s, k) == 0) return e->id;
        }
        i = (i + 1) & v->mask;
    }
}

/* ------------------------------------------------------------------------------- Vocab() */

static void vocab_dealloc(Vocab *self) {
    PyMem_Free(self->slots);
    PyMem_Free(self->pool);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Fill the pool and the table from `seq` (a tuple or list of bytes); 0 with an exception set. */
static int vocab_fill(Vocab *self, PyObject *seq, Py_ssize_t n) {
    size_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyBytes_Check(t)) {
            PyErr_Format(PyExc_TypeError, "Vocab: token %zd is %.80s, not bytes", i, Py_TYPE(t)->tp_name);
            return 0;
        }
        total += (size_t)PyBytes_GET_SIZE(t);
        if (total > UINT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "Vocab: the tokens hold over 4 GB");
            return 0;
        }
    }
    uint64_t count = 8;
    int bits = 3;
    while (count < 2 * (uint64_t)n) count <<= 1, bits++;
    self->slots = PyMem_Malloc(count * sizeof(Slot));
    self->pool = PyMem_Malloc(total ? total : 1);
    if (!self->slots || !self->pool) {
        PyErr_NoMemory();
        return 0;
    }
    for (uint64_t i = 0; i < count; i++) self->slots[i].id = -1;
    self->mask = count - 1;
    self->shift = 64 - bits;
    size_t off = 0;
    for (Py_ssize_t id = 0; id < n; id++) {
        PyObject *t = PySequence_Fast_GET_ITEM(seq, id);
        const uint8_t *s = (const uint8_t *)PyBytes_AS_STRING(t);
        size_t len = (size_t)PyBytes_GET_SIZE(t);
        int cont = len >= 2 && s[0] == '#' && s[1] == '#';
        uint64_t h = cont ? self->hash_cont : FNV_OFFSET;
        for (size_t k = cont ? 2 : 0; k < len; k++) h = fnv_step(h, s[k]);
        if (lookup(self, h, cont, s + (cont ? 2 : 0), len - (cont ? 2 : 0)) >= 0) {
            PyErr_Format(PyExc_ValueError, "Vocab: token %zd is a duplicate", id);
            return 0;
        }
        uint64_t f = mix(h);
        uint64_t i = f >> self->shift;
        while (self->slots[i].id >= 0) i = (i + 1) & self->mask;
        memcpy(self->pool + off, s, len);
        self->slots[i] = (Slot){(uint32_t)f, (uint32_t)off, (uint32_t)len, (int32_t)id};
        off += len;
        if (len > self->longest) self->longest = len;
        if (cont && len - 2 > self->longest_cont) self->longest_cont = len - 2;
    }
    return 1;
}

static PyObject *vocab_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"tokens", "unk_id", "max_chars", NULL};
    PyObject *tokens;
    Py_ssize_t unk_id, max_chars;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Onn", kwlist, &tokens, &unk_id, &max_chars)) return NULL;
    PyObject *seq = PySequence_Fast(tokens, "Vocab: tokens must be a sequence of bytes");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > INT32_MAX || unk_id < 0 || unk_id >= n || max_chars < 0) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "Vocab: %zd tokens, unk_id %zd, max_chars %zd: need 0 <= unk_id < tokens "
                     "< 2**31 and max_chars >= 0", n, unk_id, max_chars);
        return NULL;
    }
    Vocab *self = (Vocab *)type->tp_alloc(type, 0);
    if (!self) {
        Py_DECREF(seq);
        return NULL;
    }
    self->slots = NULL;
    self->pool = NULL;
    self->unk_id = (int32_t)unk_id;
    self->max_chars = max_chars;
    self->longest = self->longest_cont = 0;
    self->hash_cont = fnv_step(fnv_step(FNV_OFFSET, '#'), '#');
    int ok = vocab_fill(self, seq, n);
    Py_DECREF(seq);
    if (!ok) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* ------------------------------------------------------------------------------ encode() */

enum { WORD = 0, DROP = 1, SPACE = 2, PUNCT = 3 };

static uint8_t char_class[128];
static uint8_t lower_of[128];

static void tables_init(void) {
    for (int c = 0; c < 128; c++) {
        uint8_t k = WORD;
        if (c < 0x20 || c == 0x7F) k = DROP;
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') k = SPACE;
        if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) k = PUNCT;
        char_class[c] = k;
        lower_of[c] = (uint8_t)((c >= 'A' && c <= 'Z') ? c + 32 : c);
    }
}

/* WordPiece of the word w[0:len) (len <= max_chars, held in full), its ids written at out;
 * returns how many. `hashes` has room for min(len, longest) + 1 values. */
static size_t wordpiece(const Vocab *v, const uint8_t *w, size_t len, int32_t *out, uint64_t *hashes) {
    size_t n = 0, start = 0;
    while (start < len) {
        int cont = start > 0;
        size_t most = cont ? v->longest_cont : v->longest;
        if (most > len - start) most = len - start;
        uint64_t h = cont ? v->hash_cont : FNV_OFFSET;
        for (size_t k = 1; k <= most; k++) hashes[k] = h = fnv_step(h, w[start + k - 1]);
        int32_t id = -1;
        size_t k = most;
        for (; k > 0; k--)
            if ((id = lookup(v, hashes[k], cont, w + start, k)) >= 0) break;
        if (id < 0) {
            out[0] = v->unk_id;
            return 1;
        }
        out[n++] = id;
        start += k;
    }
    return n;
}

/* One ASCII text (no NUL) to ids at out; returns how many. `word` holds max_chars bytes. */
static size_t encode_text(const Vocab *v, const uint8_t *s, size_t len, int lower, uint8_t *word, uint64_t *hashes,
                          int32_t *out) {
    size_t n = 0, wlen = 0;
    size_t cap = (size_t)v->max_chars;
    for (size_t i = 0; i <= len; i++) {
        uint8_t c = i < len ? s[i] : ' ';
        uint8_t k = char_class[c];
        if (k == WORD) {
            if (wlen < cap) word[wlen] = lower ? lower_of[c] : c;
            wlen++;
            continue;
        }
        if (k == DROP) continue;
        if (wlen) {
            if (wlen > cap) out[n++] = v->unk_id;
            else n += wordpiece(v, word, wlen, out + n, hashes);
            wlen = 0;
        }
        if (k == PUNCT) {
            if (cap < 1) out[n++] = v->unk_id;
            else n += wordpiece(v, &c, 1, out + n, hashes);
        }
    }
    return n;
}

static PyObject *vocab_encode(Vocab *self, PyObject *args) {
    PyObject *texts;
    int lower;
    if (!PyArg_ParseTuple(args, "Op:encode", &texts, &lower)) return NULL;
    PyObject *tup = PySequence_Tuple(texts); /* holds every text while the GIL is released */
    if (!tup) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(tup);
    size_t total = 0, longest = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyTuple_GET_ITEM(tup, i);
        if (!PyUnicode_Check(t)) {
            PyErr_Format(PyExc_TypeError, "encode: text %zd is %.80s, not str", i, Py_TYPE(t)->tp_name);
            Py_DECREF(tup);
            return NULL;
        }
#if PY_VERSION_HEX < 0x030C0000
        if (PyUnicode_READY(t) < 0) {
            Py_DECREF(tup);
            return NULL;
        }
#endif
        size_t len = (size_t)PyUnicode_GET_LENGTH(t);
        if (!PyUnicode_IS_ASCII(t) || memchr(PyUnicode_1BYTE_DATA(t), 0, len)) {
            Py_DECREF(tup);
            Py_RETURN_NONE;
        }
        total += len;
        if (len > longest) longest = len;
    }
    /* A word of k bytes gives at most k ids, so there are at most `total` ids. */
    PyObject *ids = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(total * sizeof(int32_t)));
    PyObject *offsets = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)((n + 1) * sizeof(int64_t)));
    size_t room = longest < (size_t)self->max_chars ? longest : (size_t)self->max_chars;
    uint8_t *word = PyMem_Malloc(room + 1);
    uint64_t *hashes = PyMem_Malloc((room + 1) * sizeof(uint64_t));
    if (!ids || !offsets || !word || !hashes) {
        if (ids && offsets) PyErr_NoMemory();
        goto fail;
    }
    int32_t *out = (int32_t *)PyByteArray_AS_STRING(ids);
    int64_t *offs = (int64_t *)PyByteArray_AS_STRING(offsets);
    size_t count = 0;
    Py_BEGIN_ALLOW_THREADS
    offs[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyTuple_GET_ITEM(tup, i);
        count += encode_text(self, PyUnicode_1BYTE_DATA(t), (size_t)PyUnicode_GET_LENGTH(t), lower, word, hashes,
                             out + count);
        offs[i + 1] = (int64_t)count;
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(word);
    PyMem_Free(hashes);
    Py_DECREF(tup);
    if (PyByteArray_Resize(ids, (Py_ssize_t)(count * sizeof(int32_t))) < 0) {
        Py_DECREF(ids);
        Py_DECREF(offsets);
        return NULL;
    }
    PyObject *result = PyTuple_Pack(2, ids, offsets);
    Py_DECREF(ids);
    Py_DECREF(offsets);
    return result;
fail:
    PyMem_Free(word);
    PyMem_Free(hashes);
    Py_XDECREF(ids);
    Py_XDECREF(offsets);
    Py_DECREF(tup);
    return NULL;
}

static PyMethodDef vocab_methods[] = {
    {"encode", (PyCFunction)vocab_encode, METH_VARARGS,
     "encode(texts, lower) -> (ids, offsets) or None: int32 ids and int64 offsets as bytearrays; None when a "
     "text is not ASCII or holds a NUL"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject VocabType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bert_data._wordpiece.Vocab",
    .tp_basicsize = sizeof(Vocab),
    .tp_dealloc = (destructor)vocab_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Vocab(tokens, unk_id, max_chars): a WordPiece vocabulary (token i has id i) for encode()",
    .tp_methods = vocab_methods,
    .tp_new = vocab_new,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_wordpiece", "BERT's tokenization of ASCII text, in C",
                                    -1, NULL};

PyMODINIT_FUNC PyInit__wordpiece(void) {
    tables_init();
    if (PyType_Ready(&VocabType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    /* tokenization.py uses the module only when API equals its WORDPIECE_API: raise both together
     * when an argument or a result changes, so that a stale build is never called */
    Py_INCREF(&VocabType);
    if (PyModule_AddObject(m, "Vocab", (PyObject *)&VocabType) < 0) {
        Py_DECREF(&VocabType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "API", 1) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
