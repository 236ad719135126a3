/* jaxdata.sources._masked: masked records (ids, then one mask byte per id) split into ids and masks.
 *
 * A read of a fine-tuning dataset gives its records' bytes (one bytes object each, or
 * joined): record i is n_i ids of `itemsize` bytes, then n_i mask bytes. The ids and
 * masks are two memcpys per record here, without joining the records first; NumPy
 * needs a byte mask over the whole read and two boolean gathers (~10x slower). The
 * Python wrapper and the NumPy version live in masked.py beside this file. Past
 * RELEASE_GIL_AT tokens the GIL is released. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define RELEASE_GIL_AT ((int64_t)1 << 20)

static int checked_buffer(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t itemsize, const char *name) {
  int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj, view, flags) < 0) {
    return -1;
  }
  if (itemsize && view->len % itemsize) {
    PyErr_Format(PyExc_ValueError, "%s: %zd bytes is not a whole number of %zd-byte items", name, view->len,
                 itemsize);
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

PyDoc_STRVAR(split_masked_doc,
"split_masked(joined, lengths, itemsize, tokens, mask)\n\n"
"Masked records back to back in `joined` (bytes: record i is lengths[i] ids of\n"
"`itemsize` bytes, then lengths[i] mask bytes), or one bytes object per record\n"
"(a tuple or list: no join first): copies the ids into `tokens` (bytes,\n"
"sum(lengths) x itemsize) and the masks into `mask` (sum(lengths)).\n"
"Returns the index of the first mask byte above 1, or -1.");

/* Where each record's bytes begin: in one joined buffer, or in one bytes object per record. */
static const char **record_starts(PyObject *records, const Py_buffer *joined, const int64_t *lengths,
                                  Py_ssize_t count, Py_ssize_t itemsize) {
  const char **starts = PyMem_Malloc((size_t)(count ? count : 1) * sizeof(char *));
  if (!starts) {
    PyErr_NoMemory();
    return NULL;
  }
  int64_t at = 0;
  for (Py_ssize_t i = 0; i < count; i++) {
    if (joined) {
      starts[i] = (const char *)joined->buf + at;
      at += lengths[i] * (itemsize + 1);
      continue;
    }
    PyObject *record = PySequence_Fast_GET_ITEM(records, i);
    if (!PyBytes_Check(record) || PyBytes_GET_SIZE(record) != lengths[i] * (itemsize + 1)) {
      PyErr_Format(PyExc_ValueError, "split_masked: record %zd is not bytes of lengths[%zd] x (itemsize + 1)", i, i);
      PyMem_Free(starts);
      return NULL;
    }
    starts[i] = PyBytes_AS_STRING(record);
  }
  return starts;
}

static PyObject *split_masked(PyObject *self, PyObject *args) {
  PyObject *joined_obj, *lengths_obj, *tokens_obj, *mask_obj;
  Py_ssize_t itemsize;
  if (!PyArg_ParseTuple(args, "OOnOO", &joined_obj, &lengths_obj, &itemsize, &tokens_obj, &mask_obj)) {
    return NULL;
  }
  const int separate = PyTuple_Check(joined_obj) || PyList_Check(joined_obj);
  Py_buffer views[4] = {{0}};
  int count = separate ? 1 : 0;  /* one bytes object per record: views[0] stays unused */
  if ((!separate && checked_buffer(joined_obj, &views[count++], 0, 0, "joined") < 0) ||
      checked_buffer(lengths_obj, &views[count++], 0, 8, "lengths") < 0 ||
      checked_buffer(tokens_obj, &views[count++], 1, 0, "tokens") < 0 ||
      checked_buffer(mask_obj, &views[count++], 1, 0, "mask") < 0) {
    release_all(views + separate, count - 1 - separate);
    return NULL;
  }
  const int64_t *lengths = views[1].buf;
  const Py_ssize_t records = views[1].len / 8;
  int64_t total = 0;
  const char *problem = itemsize < 1 || itemsize > 8 ? "itemsize must be in [1, 8]" : NULL;
  for (Py_ssize_t i = 0; !problem && i < records; i++) {
    if (lengths[i] < 0) problem = "a length is negative";
    total += lengths[i];
  }
  if (!problem && separate && PySequence_Fast_GET_SIZE(joined_obj) != records)
    problem = "a tuple or list of records must hold one record per length";
  if (!problem && ((!separate && views[0].len != total * (itemsize + 1)) || views[2].len != total * itemsize ||
                   views[3].len != total))
    problem = "joined, tokens and mask must hold sum(lengths) x (itemsize + 1), x itemsize and x 1 bytes";
  if (problem) {
    PyErr_Format(PyExc_ValueError, "split_masked: %s", problem);
    release_all(views + separate, count - separate);
    return NULL;
  }
  /* The records stay alive while the GIL is released: the caller's tuple or list holds them. */
  const char **starts = record_starts(joined_obj, separate ? NULL : &views[0], lengths, records, itemsize);
  if (!starts) {
    release_all(views + separate, count - separate);
    return NULL;
  }
  char *tokens = views[2].buf;
  uint8_t *mask = views[3].buf;
  PyThreadState *released = total >= RELEASE_GIL_AT ? PyEval_SaveThread() : NULL;
  int64_t bad = -1, done = 0;
  for (Py_ssize_t i = 0; i < records; i++) {
    const int64_t n = lengths[i];
    memcpy(tokens + done * itemsize, starts[i], (size_t)(n * itemsize));
    memcpy(mask + done, starts[i] + n * itemsize, (size_t)n);
    done += n;
  }
  for (int64_t k = 0; k < total && bad < 0; k++) {
    if (mask[k] > 1) bad = k;
  }
  if (released) PyEval_RestoreThread(released);
  PyMem_Free(starts);
  release_all(views + separate, count - separate);
  return PyLong_FromLongLong(bad);
}

static PyMethodDef methods[] = {
    {"split_masked", split_masked, METH_VARARGS, split_masked_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "jaxdata.sources._masked",
    "Masked records split into ids and masks (see jaxdata.sources.masked).", -1, methods,
};

PyMODINIT_FUNC PyInit__masked(void) { return PyModule_Create(&module); }
