/* jaxdata.transforms._native: the per-step loops that NumPy cannot run at memory
 * speed, in C.
 *
 *   write_runs   a step's rows from runs of consecutive grid slots (pieces and
 *                padding): tokens, targets, segment ids, positions, loss mask,
 *                source ids in one pass per run (NumPy needs a per-token index
 *                array and six passes)
 *   first_fit    the lowest row with room for each piece (a max segment tree
 *                over the rows' free space), the same rows as fit.first_fit
 *   restart_segments
 *                documents that start inside a window: a new segment and
 *                positions from 0 from each start to the next or the row's end
 *                (NumPy needs a few whole-grid passes: cumsum, accumulate)
 *
 * All hold the GIL for calls as short as a training step's (a 32 x 2048 step
 * is written in ~0.07 ms): a thread that hands the GIL to a busy Python
 * thread waits up to the 5 ms switch interval to get it back, which costs the
 * pipeline far more than the call. Past RELEASE_GIL_AT items of work they
 * release it, so other Python threads run meanwhile.
 *
 * Arrays arrive through the buffer protocol (no NumPy headers at build time);
 * every index is checked here before anything is written, so a wrong call is
 * a ValueError, never a stray write. The Python wrappers and the pure-NumPy
 * reference live in kernels.py beside this file. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

#define RELEASE_GIL_AT ((Py_ssize_t)1 << 20) /* slots or pieces: ~1 ms of work */

static int checked_buffer(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t itemsize,
                          const char *name) {
  int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj, view, flags) < 0) {
    return -1;
  }
  if (itemsize && view->len % itemsize) {
    PyErr_Format(PyExc_ValueError, "%s: %zd bytes is not a whole number of %zd-byte items", name,
                 view->len, itemsize);
    PyBuffer_Release(view);
    return -1;
  }
  return 0;
}

static void release_all(Py_buffer *views, int count) {
  for (int i = 0; i < count; i++) {
    PyBuffer_Release(&views[i]);
  }
}

/* Copies k tokens from b (a buffer of type T) and the k tokens after each
 * one into int32 columns. */
#define COPY_RUN(T)                                      \
  do {                                                   \
    const T *b = (const T *)buffer + s;                  \
    for (int64_t j = 0; j < k; j++) {                    \
      tokens[d + j] = (int32_t)b[j];                     \
      targets[d + j] = (int32_t)b[j + 1];                \
    }                                                    \
  } while (0)

enum { BUFFER, SRC, DST, LEN, SEGMENT, SOURCE, TOKENS, TARGETS, SEGMENT_IDS, POSITIONS, LOSS_MASK,
       SOURCE_IDS, VIEWS };

PyDoc_STRVAR(write_runs_doc,
"write_runs(buffer, kind, run_src, run_dst, run_len, run_segment, run_source,\n"
"           tokens, targets, segment_ids, positions, loss_mask, source_ids, trained=None)\n\n"
"For each run r of run_len[r] grid slots from run_dst[r]: tokens =\n"
"buffer[run_src[r] + j], targets = buffer[run_src[r] + j + 1], segment_ids =\n"
"run_segment[r], source_ids = run_source[r], and where run_segment[r] != 0\n"
"(a piece) positions = j and loss_mask = 1, else 0. kind is the buffer's\n"
"NumPy dtype char (b B h H i I); run arrays are int64 (segment, source:\n"
"int32), outputs flat int32 of one size. trained (uint8, laid out as buffer):\n"
"loss_mask is 1 only where trained[run_src[r] + j + 1] (the target's flag) is.");

static PyObject *write_runs(PyObject *self, PyObject *args) {
  PyObject *objects[VIEWS], *trained_obj = Py_None;
  int kind;
  if (!PyArg_ParseTuple(args, "OCOOOOOOOOOOO|O", &objects[0], &kind, &objects[1], &objects[2],
                        &objects[3], &objects[4], &objects[5], &objects[6], &objects[7], &objects[8],
                        &objects[9], &objects[10], &objects[11], &trained_obj)) {
    return NULL;
  }
  Py_ssize_t buffer_itemsize;
  switch (kind) {
    case 'b': case 'B': buffer_itemsize = 1; break;
    case 'h': case 'H': buffer_itemsize = 2; break;
    case 'i': case 'I': buffer_itemsize = 4; break;
    default:
      PyErr_Format(PyExc_ValueError, "write_runs: buffer kind %c is not one of b B h H i I", kind);
      return NULL;
  }
  static const char *names[VIEWS] = {"buffer", "run_src", "run_dst", "run_len", "run_segment",
                                     "run_source", "tokens", "targets", "segment_ids", "positions",
                                     "loss_mask", "source_ids"};
  const Py_ssize_t itemsizes[VIEWS] = {buffer_itemsize, 8, 8, 8, 4, 4, 4, 4, 4, 4, 4, 4};
  Py_buffer views[VIEWS];
  for (int i = 0; i < VIEWS; i++) {
    if (checked_buffer(objects[i], &views[i], i >= TOKENS, itemsizes[i], names[i]) < 0) {
      release_all(views, i);
      return NULL;
    }
  }
  const Py_ssize_t runs = views[SRC].len / 8, grid = views[TOKENS].len / 4;
  const Py_ssize_t buffer_size = views[BUFFER].len / buffer_itemsize;
  for (int i = DST; i < VIEWS; i++) {
    Py_ssize_t expected = i < TOKENS ? runs : grid;
    if (views[i].len / itemsizes[i] != expected) {
      PyErr_Format(PyExc_ValueError, "write_runs: %s holds %zd items, expected %zd", names[i],
                   views[i].len / itemsizes[i], expected);
      release_all(views, VIEWS);
      return NULL;
    }
  }
  Py_buffer trained_view = {0};
  const uint8_t *trained = NULL;
  if (trained_obj != Py_None) {
    if (checked_buffer(trained_obj, &trained_view, 0, 1, "trained") < 0) {
      release_all(views, VIEWS);
      return NULL;
    }
    if (trained_view.len != buffer_size) {
      PyErr_Format(PyExc_ValueError, "write_runs: trained holds %zd items, expected %zd (the buffer's)",
                   trained_view.len, buffer_size);
      PyBuffer_Release(&trained_view);
      release_all(views, VIEWS);
      return NULL;
    }
    trained = trained_view.buf;
  }
  const void *buffer = views[BUFFER].buf;
  const int64_t *run_src = views[SRC].buf, *run_dst = views[DST].buf, *run_len = views[LEN].buf;
  const int32_t *run_segment = views[SEGMENT].buf, *run_source = views[SOURCE].buf;
  int32_t *tokens = views[TOKENS].buf, *targets = views[TARGETS].buf;
  int32_t *segment_ids = views[SEGMENT_IDS].buf, *positions = views[POSITIONS].buf;
  int32_t *loss_mask = views[LOSS_MASK].buf, *source_ids = views[SOURCE_IDS].buf;
  Py_ssize_t bad = -1;
  PyThreadState *released = grid >= RELEASE_GIL_AT ? PyEval_SaveThread() : NULL;
  for (Py_ssize_t r = 0; r < runs; r++) {  // every run inside the grid and the buffer (+1: targets)
    int64_t s = run_src[r], d = run_dst[r], k = run_len[r];
    if (k < 0 || d < 0 || s < 0 || d > grid - k || s > buffer_size - 1 - k) {
      bad = r;
      break;
    }
  }
  if (bad < 0) {
    for (Py_ssize_t r = 0; r < runs; r++) {
      const int64_t s = run_src[r], d = run_dst[r], k = run_len[r];
      switch (kind) {
        case 'b': COPY_RUN(int8_t); break;
        case 'B': COPY_RUN(uint8_t); break;
        case 'h': COPY_RUN(int16_t); break;
        case 'H': COPY_RUN(uint16_t); break;
        case 'i': COPY_RUN(int32_t); break;
        default: COPY_RUN(uint32_t); break;
      }
      const int32_t segment = run_segment[r], source = run_source[r], piece = segment != 0;
      for (int64_t j = 0; j < k; j++) {
        segment_ids[d + j] = segment;
        source_ids[d + j] = source;
        loss_mask[d + j] = piece && (!trained || trained[s + j + 1]);  /* with masks: the target's flag */
        positions[d + j] = piece ? (int32_t)j : 0;
      }
    }
  }
  if (released) PyEval_RestoreThread(released);
  if (trained) PyBuffer_Release(&trained_view);
  if (bad >= 0) {
    PyErr_Format(PyExc_ValueError,
                 "write_runs: run %zd (src %lld, dst %lld, length %lld) lies outside the buffer "
                 "(%zd tokens) or the grid (%zd slots)", bad, (long long)run_src[bad],
                 (long long)run_dst[bad], (long long)run_len[bad], buffer_size, grid);
  }
  release_all(views, VIEWS);
  if (bad >= 0) {
    return NULL;
  }
  Py_RETURN_NONE;
}

/* A set of int64 ids >= 0 (open addressing, linear probing; -1 marks empty). */
typedef struct {
  int64_t *slots;
  uint64_t mask;
} IdSet;

static uint64_t id_slot(const IdSet *set, int64_t id) {
  return ((uint64_t)id * 0x9E3779B97F4A7C15ULL) & set->mask;
}

static int id_set_has(const IdSet *set, int64_t id) {
  for (uint64_t i = id_slot(set, id);; i = (i + 1) & set->mask) {
    if (set->slots[i] == id) return 1;
    if (set->slots[i] < 0) return 0;
  }
}

static void id_set_add(IdSet *set, int64_t id) {
  uint64_t i = id_slot(set, id);
  while (set->slots[i] >= 0 && set->slots[i] != id) i = (i + 1) & set->mask;
  set->slots[i] = id;
}

PyDoc_STRVAR(first_fit_doc,
"first_fit(lengths, documents, rows, seq_len, out, max_segments=0)\n\n"
"Writes into out (int64) the row of each piece (-1: no room): the lowest\n"
"row whose free space holds it. lengths and documents are int64; pieces with\n"
"the same document id >= 0 are one split document: after one finds no row,\n"
"the later ones are not placed either. documents may be None. max_segments\n"
"> 0: a row that holds that many pieces takes no more.");

static PyObject *first_fit(PyObject *self, PyObject *args) {
  PyObject *lengths_obj, *documents_obj, *out_obj;
  Py_ssize_t rows, max_segments = 0;
  long long seq_len;
  if (!PyArg_ParseTuple(args, "OOnLO|n", &lengths_obj, &documents_obj, &rows, &seq_len, &out_obj, &max_segments)) {
    return NULL;
  }
  if (max_segments < 0) {
    PyErr_Format(PyExc_ValueError, "first_fit: max_segments must be >= 0, got %zd", max_segments);
    return NULL;
  }
  if (rows < 1 || rows > ((Py_ssize_t)1 << 40)) {
    PyErr_Format(PyExc_ValueError, "first_fit: rows must be in [1, 2**40], got %zd", rows);
    return NULL;
  }
  Py_buffer views[3];
  int count = 0;
  int has_documents = documents_obj != Py_None;
  if (checked_buffer(lengths_obj, &views[count++], 0, 8, "lengths") < 0 ||
      checked_buffer(out_obj, &views[count++], 1, 8, "out") < 0 ||
      (has_documents && checked_buffer(documents_obj, &views[count++], 0, 8, "documents") < 0)) {
    release_all(views, count - 1);
    return NULL;
  }
  const Py_ssize_t pieces = views[0].len / 8;
  if (views[1].len / 8 != pieces || (has_documents && views[2].len / 8 != pieces)) {
    PyErr_SetString(PyExc_ValueError, "first_fit: lengths, documents and out must have one size");
    release_all(views, count);
    return NULL;
  }
  Py_ssize_t size = 1;
  while (size < rows) size *= 2;
  uint64_t capacity = 2;
  while (capacity < 2 * (uint64_t)pieces + 2) capacity *= 2;
  int64_t *tree = malloc(sizeof(int64_t) * 2 * size);
  int64_t *segments = calloc((size_t)rows, sizeof(int64_t)); /* pieces per row, for max_segments */
  IdSet blocked = {malloc(sizeof(int64_t) * capacity), capacity - 1};
  if (!tree || !blocked.slots || !segments) {
    free(tree);
    free(segments);
    free(blocked.slots);
    release_all(views, count);
    return PyErr_NoMemory();
  }
  const int64_t *lengths = views[0].buf;
  const int64_t *documents = has_documents ? views[2].buf : NULL;
  int64_t *out = views[1].buf;
  PyThreadState *released = pieces >= RELEASE_GIL_AT ? PyEval_SaveThread() : NULL;
  for (uint64_t i = 0; i < capacity; i++) blocked.slots[i] = -1;
  for (Py_ssize_t i = 0; i < size; i++) tree[size + i] = i < rows ? seq_len : -1;
  for (Py_ssize_t node = size - 1; node > 0; node--) {
    const int64_t left = tree[2 * node], right = tree[2 * node + 1];
    tree[node] = left > right ? left : right;
  }
  for (Py_ssize_t i = 0; i < pieces; i++) {
    const int64_t length = lengths[i], document = documents ? documents[i] : -1;
    if (tree[1] < length || (document >= 0 && id_set_has(&blocked, document))) {
      out[i] = -1;
      if (document >= 0) id_set_add(&blocked, document);
      continue;
    }
    Py_ssize_t node = 1;
    while (node < size) {
      node <<= 1;
      if (tree[node] < length) node += 1;
    }
    out[i] = node - size;
    tree[node] -= length;
    if (max_segments && ++segments[node - size] == max_segments) tree[node] = -1; /* the row is closed */
    for (node >>= 1; node; node >>= 1) {
      const int64_t left = tree[2 * node], right = tree[2 * node + 1];
      const int64_t top = left > right ? left : right;
      if (tree[node] == top) break;
      tree[node] = top;
    }
  }
  if (released) PyEval_RestoreThread(released);
  free(tree);
  free(segments);
  free(blocked.slots);
  release_all(views, count);
  Py_RETURN_NONE;
}

PyDoc_STRVAR(restart_segments_doc,
"restart_segments(starts, seq_len, segment_ids, positions)\n\n"
"starts: int64 grid slots in ascending order where a document starts inside\n"
"a row. From each start s to the next start of its row (or the row's end):\n"
"segment_ids += the number of its row's starts up to s (where segment_ids >\n"
"0: padding stays 0) and positions = min(positions, slot - s). Outputs flat\n"
"int32 of one size, a multiple of seq_len.");

static PyObject *restart_segments(PyObject *self, PyObject *args) {
  PyObject *starts_obj, *segments_obj, *positions_obj;
  long long seq_len;
  if (!PyArg_ParseTuple(args, "OLOO", &starts_obj, &seq_len, &segments_obj, &positions_obj)) {
    return NULL;
  }
  Py_buffer views[3];
  int count = 0;
  if (checked_buffer(starts_obj, &views[count++], 0, 8, "starts") < 0 ||
      checked_buffer(segments_obj, &views[count++], 1, 4, "segment_ids") < 0 ||
      checked_buffer(positions_obj, &views[count++], 1, 4, "positions") < 0) {
    release_all(views, count - 1);
    return NULL;
  }
  const Py_ssize_t n = views[0].len / 8, grid = views[1].len / 4;
  const int64_t *starts = views[0].buf;
  int32_t *segments = views[1].buf, *positions = views[2].buf;
  const char *problem = NULL;
  if (views[2].len / 4 != grid) problem = "segment_ids and positions must have one size";
  else if (seq_len < 1 || grid % seq_len) problem = "seq_len must be >= 1 and divide the grid";
  for (Py_ssize_t i = 0; !problem && i < n; i++) {
    if (starts[i] < 0 || starts[i] >= grid) problem = "a start lies outside the grid";
    else if (i && starts[i] < starts[i - 1]) problem = "starts must be in ascending order";
  }
  if (problem) {
    PyErr_Format(PyExc_ValueError, "restart_segments: %s", problem);
    release_all(views, count);
    return NULL;
  }
  int64_t row = -1, bump = 0;
  for (Py_ssize_t i = 0; i < n; i++) {
    const int64_t start = starts[i], start_row = start / seq_len, row_end = (start_row + 1) * seq_len;
    if (start_row != row) row = start_row, bump = 0;
    bump++;
    const int64_t end = i + 1 < n && starts[i + 1] < row_end ? starts[i + 1] : row_end;
    for (int64_t j = start; j < end; j++) {
      if (segments[j] > 0) segments[j] += (int32_t)bump;
      if (positions[j] > j - start) positions[j] = (int32_t)(j - start);
    }
  }
  release_all(views, count);
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"write_runs", write_runs, METH_VARARGS, write_runs_doc},
    {"first_fit", first_fit, METH_VARARGS, first_fit_doc},
    {"restart_segments", restart_segments, METH_VARARGS, restart_segments_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "jaxdata.transforms._native",
    "C loops for assembly and first-fit placement (see jaxdata.transforms.kernels).", -1, methods,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
