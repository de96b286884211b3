#include "executor/resource_limits.hpp"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>

namespace rfaas::executor_process {

bool limit_memory(uint32_t mib, std::string &error) noexcept {
  if (mib == 0)
    return true;
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer's shadow memory is terabytes of private writable mappings.
  return true;
#endif
  struct rlimit rl;
  rl.rlim_cur = rl.rlim_max = static_cast<rlim_t>(mib) << 20;
  if (setrlimit(RLIMIT_DATA, &rl) == 0)
    return true;
  error = std::string("setrlimit(RLIMIT_DATA, ") + std::to_string(mib) +
          " MiB): " + std::strerror(errno);
  return false;
}

bool pin_thread(int cpu, std::string &error) noexcept {
  if (cpu < 0 || cpu >= CPU_SETSIZE) {
    error = "CPU " + std::to_string(cpu) + " is out of range";
    return false;
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  if (rc == 0)
    return true;
  error = "cannot pin to CPU " + std::to_string(cpu) + ": " + std::strerror(rc);
  return false;
}

} // namespace rfaas::executor_process
