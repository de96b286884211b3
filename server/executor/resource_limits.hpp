// What an executor does to stay inside what its manager leased: its memory
// limit and the pinning of its worker threads.
#pragma once

#include <cstdint>
#include <string>

namespace rfaas::executor_process {

/// Limit the calling process's data (RLIMIT_DATA) to `mib` MiB; 0 = no limit.
///
/// RLIMIT_DATA rather than RLIMIT_AS: glibc reserves 64 MiB of address space
/// per thread arena and libfabric maps large read-only regions, so an
/// address-space limit would bite long before the function's data does, by an
/// amount that depends on the provider. Since Linux 4.7 RLIMIT_DATA counts
/// every private writable mapping (heap, anonymous mmap, thread stacks).
/// Not applied under AddressSanitizer (its shadow memory would exceed any
/// limit). Returns false with the reason in `error` on failure.
bool limit_memory(uint32_t mib, std::string &error) noexcept;

/// Pin the calling thread to CPU `cpu`. Returns false with the reason in
/// `error` (e.g. the CPU is outside the process's cpuset).
bool pin_thread(int cpu, std::string &error) noexcept;

} // namespace rfaas::executor_process
