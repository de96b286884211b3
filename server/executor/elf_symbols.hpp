// The functions a shared library exports, read from the library's bytes.
//
// Invocations name a function by the hash of its name, so the executor needs
// the list of names up front, without the client sending it: it reads the
// dynamic symbol table (.dynsym) of the ELF image it received.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace rfaas::executor_process {

/// Check, before dlopen(), that `bytes` is a complete 64-bit ELF shared object
/// for this host: header, program headers and every loadable segment's file
/// contents lie inside the image. The dynamic loader maps segments from the
/// file without comparing them to its size, so a truncated image would load
/// and then die of SIGBUS on first access. Returns false with a sentence in
/// `error` otherwise.
bool check_elf_image(const void *bytes, size_t size, std::string &error);

/// List the names of the functions exported by the 64-bit ELF shared object in
/// `bytes`: defined, global or weak, default or protected visibility, of type
/// function (or GNU indirect function); `_init` and `_fini` excluded. Names are
/// sorted and unique. Every offset is bounds-checked, so malformed input yields
/// false with a sentence in `error`, never a crash.
bool list_exported_functions(const void *bytes, size_t size, std::vector<std::string> &names,
                             std::string &error);

} // namespace rfaas::executor_process
