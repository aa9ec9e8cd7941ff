/* The vendor runtime of the backend somalloc was built with, opened by the
 * C programs that call a few of its functions themselves (the checks and
 * the cost benchmark): the same library somalloc loads (SOMALLOC_CUDART or
 * SOMALLOC_HIP first, then the usual names), its functions looked up by
 * name, which CUDA and HIP share but for the prefix. */
#ifndef SOMALLOC_TEST_RUNTIME_H
#define SOMALLOC_TEST_RUNTIME_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "somalloc.h"

static void *runtime_lib;
static const char *runtime_prefix;

/* Opens the runtime; 0 when none loads. */
static int open_runtime(void) {
  int hip = strcmp(somalloc_backend(), "rocm") == 0;
  const char *cuda[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so", NULL};
  const char *rocm[] = {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so", NULL};
  const char **names = hip ? rocm : cuda;
  const char *env = getenv(hip ? "SOMALLOC_HIP" : "SOMALLOC_CUDART");
  runtime_lib = env ? dlopen(env, RTLD_NOW) : NULL;
  for (int i = 0; !runtime_lib && names[i]; i++) runtime_lib = dlopen(names[i], RTLD_NOW);
  runtime_prefix = hip ? "hip" : "cuda";
  return runtime_lib != NULL;
}

/* The runtime's function `cuda<suffix>` or `hip<suffix>`; NULL if absent. */
static void *runtime_fn(const char *suffix) {
  char name[64];
  snprintf(name, sizeof name, "%s%s", runtime_prefix, suffix);
  return dlsym(runtime_lib, name);
}

/* Sets `var` to the runtime's function `suffix` (of type `type`), or
 * returns 0 from the calling function. */
#define RUNTIME_FN(var, type, suffix)  \
  var = (type)runtime_fn(suffix);      \
  if (!var) return 0;

#endif
