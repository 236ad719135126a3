/* jaxdata.mixture._exact_pick: the exact interleave's pick loop (pick_loops.pick_exact) in C.
 *
 * The loop picks, document after document, the released dataset due first
 * (jaxdata/mixture/interleave.py's docstring). Its keys are int / int divisions that
 * Python rounds correctly; with both operands below 2**53 in magnitude they
 * are exact doubles, and an IEEE division of exact doubles is the same
 * correctly rounded value. So this loop makes the same picks bit for bit as
 * long as every number stays below 2**53, and stops before any pick that
 * would leave that range:
 *
 *   pick(...) -> (status, t, count, tokens)
 *     DONE       a limit was reached: the loop is over
 *     ONE_PICK   the next pick reads a marked length (a pass end, the end of
 *                a dataset): Python makes that one pick, then calls again
 *     OUT_OF_RANGE  a number would leave the exact range, or the state is
 *                one this loop leaves to Python (no dataset due, a list
 *                too short, a weight of 0): Python finishes the loop
 *
 * Nothing is committed for the pick it stops before; the lists it was given
 * (cursor, shift, due, release, choices) hold the loop's state on return.
 * The GIL is kept: a step's loop is ~100 documents. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>

enum { DONE = 0, ONE_PICK = 1, OUT_OF_RANGE = 2 };

#define EXACT ((int64_t)1 << 53) /* every integer of magnitude <= 2**53 is an exact double */

typedef struct {
  PyObject *lengths; /* the dataset's encoded lengths (a list) */
  int64_t cursor, shift, weight;
  double due, release;
} Dataset;

static int in_exact_range(int64_t value) { return value >= -EXACT && value <= EXACT; }

/* value = an int64 PyLong; 0 if obj is not one. */
static int int64_of(PyObject *obj, int64_t *value) {
  int overflow = 0;
  if (!PyLong_Check(obj)) return 0;
  long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
  if (overflow || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return 0;
  }
  *value = v;
  return 1;
}

/* value = a PyLong within the exact range; 0 if obj is not one. */
static int exact_int(PyObject *obj, int64_t *value) { return int64_of(obj, value) && in_exact_range(*value); }

/* value = list[at], an int64 (an encoded length: marks are far below -2**53). */
static int list_int64(PyObject *list, int64_t at, int64_t *value) {
  return at >= 0 && at < PyList_GET_SIZE(list) && int64_of(PyList_GET_ITEM(list, at), value);
}

static int list_int(PyObject *list, int64_t at, int64_t *value) {
  return list_int64(list, at, value) && in_exact_range(*value);
}

/* Writes the datasets' state back into the caller's lists; -1 on an allocation failure. */
static int store(Dataset *data, const int64_t *order, Py_ssize_t eligible, PyObject *cursor,
                 PyObject *shift, PyObject *due, PyObject *release) {
  for (Py_ssize_t k = 0; k < eligible; k++) {
    const int64_t i = order[k];
    PyObject *values[4] = {PyLong_FromLongLong(data[i].cursor), PyLong_FromLongLong(data[i].shift),
                           PyFloat_FromDouble(data[i].due), PyFloat_FromDouble(data[i].release)};
    PyObject *lists[4] = {cursor, shift, due, release};
    for (int j = 0; j < 4; j++) {
      if (!values[j]) {
        for (int m = 0; m < 4; m++) Py_XDECREF(values[m]);
        return -1;
      }
    }
    for (int j = 0; j < 4; j++) PyList_SetItem(lists[j], i, values[j]); /* steals the reference */
  }
  return 0;
}

PyDoc_STRVAR(pick_doc,
"pick(lengths, cursor, order, shift, due, release, weights, choices, t, count, tokens,\n"
"     doc_limit, token_limit, overhead, tokens_unit, due_scale, margin, scale, end_of_buffer)\n"
"  -> (status, t, count, tokens)\n\n"
"Continues pick_loops.pick_exact's loop from the state given (lists are\n"
"updated in place, picks appended to choices); see this file's header for\n"
"the statuses.");

/* A limit as int64: past the int64 range it is as good as no limit. */
static int limit_int(PyObject *obj, long long *value) {
  int overflow = 0;
  *value = PyLong_AsLongLongAndOverflow(obj, &overflow);
  if (overflow > 0) *value = LLONG_MAX;
  if (overflow < 0) *value = LLONG_MIN;
  return !(*value == -1 && PyErr_Occurred());
}

static PyObject *pick(PyObject *Py_UNUSED(self), PyObject *args) {
  PyObject *lengths, *cursor, *order_obj, *shift, *due, *release, *weights, *choices;
  PyObject *count_obj, *tokens_obj, *doc_limit_obj, *token_limit_obj, *overhead_obj, *due_scale_obj, *margin_obj,
      *scale_obj, *end_of_buffer_obj;
  double t;
  int tokens_unit;
  if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!O!O!dO!O!O!O!O!pO!O!O!O!", &PyList_Type, &lengths, &PyList_Type,
                        &cursor, &PyTuple_Type, &order_obj, &PyList_Type, &shift, &PyList_Type, &due,
                        &PyList_Type, &release, &PyList_Type, &weights, &PyList_Type, &choices, &t, &PyLong_Type,
                        &count_obj, &PyLong_Type, &tokens_obj, &PyLong_Type, &doc_limit_obj, &PyLong_Type,
                        &token_limit_obj, &PyLong_Type, &overhead_obj, &tokens_unit, &PyLong_Type, &due_scale_obj,
                        &PyLong_Type, &margin_obj, &PyLong_Type, &scale_obj, &PyLong_Type, &end_of_buffer_obj)) {
    return NULL;
  }
  long long doc_limit, token_limit, end_of_buffer;
  if (!limit_int(doc_limit_obj, &doc_limit) || !limit_int(token_limit_obj, &token_limit) ||
      !limit_int(end_of_buffer_obj, &end_of_buffer)) {
    return NULL;
  }
  const Py_ssize_t size = PyList_GET_SIZE(lengths), eligible = PyTuple_GET_SIZE(order_obj);
  if (PyList_GET_SIZE(cursor) != size || PyList_GET_SIZE(shift) != size || PyList_GET_SIZE(due) != size ||
      PyList_GET_SIZE(release) != size || PyList_GET_SIZE(weights) != size) {
    PyErr_SetString(PyExc_ValueError, "pick: lengths, cursor, shift, due, release and weights must have one size");
    return NULL;
  }
  Dataset *data = PyMem_Calloc(size ? size : 1, sizeof(Dataset));
  int64_t *order = PyMem_Calloc(eligible ? eligible : 1, sizeof(int64_t));
  if (!data || !order) {
    PyMem_Free(data);
    PyMem_Free(order);
    return PyErr_NoMemory();
  }
  int status = OUT_OF_RANGE;
  int64_t count = 0, tokens = 0, overhead = 0, due_scale = 0, margin = 0, scale = 0;
  int in_range = eligible > 0 && exact_int(count_obj, &count) && exact_int(tokens_obj, &tokens) &&
                 exact_int(overhead_obj, &overhead) && exact_int(due_scale_obj, &due_scale) &&
                 exact_int(margin_obj, &margin) && exact_int(scale_obj, &scale);
  for (Py_ssize_t k = 0; in_range && k < eligible; k++) {
    int64_t i;
    in_range = exact_int(PyTuple_GET_ITEM(order_obj, k), &i) && i >= 0 && i < size;
    if (!in_range) break;
    order[k] = i;
    Dataset *d = &data[i];
    d->lengths = PyList_GET_ITEM(lengths, i);
    PyObject *due_i = PyList_GET_ITEM(due, i), *release_i = PyList_GET_ITEM(release, i);
    in_range = PyList_Check(d->lengths) && list_int(cursor, i, &d->cursor) && list_int(shift, i, &d->shift) &&
               list_int(weights, i, &d->weight) && d->weight > 0 && PyFloat_Check(due_i) &&
               PyFloat_Check(release_i);
    if (in_range) {
      d->due = PyFloat_AS_DOUBLE(due_i);
      d->release = PyFloat_AS_DOUBLE(release_i);
    }
  }
  if (!in_range) { /* nothing read, nothing changed */
    PyMem_Free(data);
    PyMem_Free(order);
    return Py_BuildValue("idOO", status, t, count_obj, tokens_obj);
  }
  for (;;) {
    int64_t best = -1;
    double best_due = INFINITY;
    for (Py_ssize_t k = 0; k < eligible; k++) {
      const Dataset *d = &data[order[k]];
      if (t > d->release && d->due < best_due) {
        best = order[k];
        best_due = d->due;
      }
    }
    if (best < 0) { /* nothing released: the one due first */
      for (Py_ssize_t k = 0; k < eligible; k++) {
        if (data[order[k]].due < best_due) {
          best = order[k];
          best_due = data[order[k]].due;
        }
      }
    }
    int64_t length, next = 1;
    if (best < 0 || !list_int64(data[best].lengths, data[best].cursor, &length)) break;
    if (length < 0) {
      status = ONE_PICK;
      break;
    }
    if (!in_exact_range(length)) break;
    Dataset *d = &data[best];
    const int64_t step_units = tokens_unit ? length : 1;
    int64_t new_tokens;
    if (__builtin_add_overflow(tokens, length + overhead, &new_tokens)) break;
    const int last = count + 1 >= doc_limit || new_tokens >= token_limit;
    int64_t new_shift = 0, due_numerator = 0, release_numerator = 0;
    if (!last) { /* the keys of best's next document, checked before anything is committed */
      if (tokens_unit && !list_int64(d->lengths, d->cursor + 1, &next)) break;
      if (next < 0) next = next <= end_of_buffer ? 1 : ~next;
      if (!tokens_unit) next = 1;
      if (__builtin_mul_overflow(scale, step_units, &new_shift) ||
          __builtin_add_overflow(new_shift, d->shift, &new_shift) ||
          __builtin_mul_overflow(due_scale, next, &due_numerator) ||
          __builtin_add_overflow(due_numerator, new_shift, &due_numerator) ||
          __builtin_mul_overflow(margin, next, &release_numerator) ||
          __builtin_add_overflow(release_numerator, new_shift, &release_numerator) ||
          !in_exact_range(new_shift) || !in_exact_range(due_numerator) || !in_exact_range(release_numerator) ||
          !in_exact_range(next)) {
        break;
      }
    }
    PyObject *picked = PyLong_FromLongLong(best);
    if (!picked || PyList_Append(choices, picked) < 0) {
      Py_XDECREF(picked);
      PyMem_Free(data);
      PyMem_Free(order);
      return NULL;
    }
    Py_DECREF(picked);
    d->cursor += 1;
    t += (double)step_units;
    tokens = new_tokens;
    count += 1;
    if (last) {
      status = DONE;
      break;
    }
    d->shift = new_shift;
    d->due = (double)due_numerator / (double)d->weight;
    d->release = (double)release_numerator / (double)d->weight - (double)next;
  }
  const int stored = store(data, order, eligible, cursor, shift, due, release);
  PyMem_Free(data);
  PyMem_Free(order);
  if (stored < 0) return NULL;
  return Py_BuildValue("idLL", status, t, count, tokens);
}

static PyMethodDef methods[] = {
    {"pick", pick, METH_VARARGS, pick_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "jaxdata.mixture._exact_pick",
    "The exact interleave's pick loop in C (see jaxdata.mixture.pick_loops).", -1, methods,
};

PyMODINIT_FUNC PyInit__exact_pick(void) {
  PyObject *m = PyModule_Create(&module);
  if (m && (PyModule_AddIntConstant(m, "DONE", DONE) < 0 || PyModule_AddIntConstant(m, "ONE_PICK", ONE_PICK) < 0 ||
            PyModule_AddIntConstant(m, "OUT_OF_RANGE", OUT_OF_RANGE) < 0)) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
