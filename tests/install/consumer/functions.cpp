// A function library built outside the rFaaS tree against the installed
// package (rfaas::function, <rfaas/function.hpp> only): the install test ships
// it to the installed executor and invokes its "echo".
#include <rfaas/function.hpp>

#include <cstring>

RFAAS_FUNCTION(echo) {
  if (in_size > out_capacity)
    return 0;
  std::memcpy(out, in, in_size);
  return in_size;
}
