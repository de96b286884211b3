#include "executor/elf_symbols.hpp"

#include <elf.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace rfaas::executor_process {

namespace {

// [offset, offset + count * entry) lies inside an image of `size` bytes.
bool in_bounds(uint64_t offset, uint64_t count, uint64_t entry, uint64_t size) {
  if (offset > size)
    return false;
  if (entry != 0 && count > (size - offset) / entry)
    return false;
  return true;
}

template <class T> T read_at(const uint8_t *base, uint64_t offset) {
  T v;
  std::memcpy(&v, base + offset, sizeof(T)); // images need not be aligned
  return v;
}

bool host_is_little_endian() {
  const uint16_t probe = 1;
  uint8_t first;
  std::memcpy(&first, &probe, 1);
  return first == 1;
}

// Header checks shared by both entry points.
bool check_header(const uint8_t *base, size_t size, Elf64_Ehdr &eh, std::string &error) {
  if (base == nullptr || size < sizeof(Elf64_Ehdr)) {
    error = "not an ELF shared object: shorter than an ELF header";
    return false;
  }
  eh = read_at<Elf64_Ehdr>(base, 0);
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
    error = "not an ELF shared object: bad ELF magic";
    return false;
  }
  if (eh.e_ident[EI_CLASS] != ELFCLASS64) {
    error = "only 64-bit ELF libraries are supported";
    return false;
  }
  if (eh.e_ident[EI_DATA] != (host_is_little_endian() ? ELFDATA2LSB : ELFDATA2MSB)) {
    error = "the library's byte order differs from this host's";
    return false;
  }
  if (eh.e_type != ET_DYN) {
    error = "not a shared object (ELF type is not ET_DYN)";
    return false;
  }
  return true;
}

} // namespace

bool check_elf_image(const void *bytes, size_t size, std::string &error) {
  const auto *base = static_cast<const uint8_t *>(bytes);
  Elf64_Ehdr eh;
  if (!check_header(base, size, eh, error))
    return false;
  if (eh.e_phnum == 0 || eh.e_phentsize != sizeof(Elf64_Phdr) ||
      !in_bounds(eh.e_phoff, eh.e_phnum, sizeof(Elf64_Phdr), size)) {
    error = "truncated or malformed ELF: program headers lie outside the image (" +
            std::to_string(size) + " bytes)";
    return false;
  }
  bool loadable = false;
  for (uint64_t i = 0; i < eh.e_phnum; ++i) {
    auto ph = read_at<Elf64_Phdr>(base, eh.e_phoff + i * sizeof(Elf64_Phdr));
    if (ph.p_type != PT_LOAD && ph.p_type != PT_DYNAMIC)
      continue;
    loadable = loadable || ph.p_type == PT_LOAD;
    if (!in_bounds(ph.p_offset, 1, ph.p_filesz, size)) {
      error = "truncated ELF: a segment needs bytes up to offset " +
              std::to_string(ph.p_offset + ph.p_filesz) + " but the image has " +
              std::to_string(size);
      return false;
    }
  }
  if (!loadable) {
    error = "malformed ELF: no loadable segment";
    return false;
  }
  return true;
}

bool list_exported_functions(const void *bytes, size_t size, std::vector<std::string> &names,
                             std::string &error) {
  names.clear();
  const auto *base = static_cast<const uint8_t *>(bytes);
  Elf64_Ehdr eh;
  if (!check_header(base, size, eh, error))
    return false;
  if (eh.e_shoff == 0 || eh.e_shentsize != sizeof(Elf64_Shdr)) {
    error = "the library has no section headers, so its exported functions cannot be listed";
    return false;
  }
  if (!in_bounds(eh.e_shoff, 1, sizeof(Elf64_Shdr), size)) {
    error = "malformed ELF: section headers lie outside the image";
    return false;
  }
  // With 0xff00 or more sections e_shnum is 0 and the count is in section 0.
  uint64_t shnum = eh.e_shnum;
  if (shnum == 0)
    shnum = read_at<Elf64_Shdr>(base, eh.e_shoff).sh_size;
  if (!in_bounds(eh.e_shoff, shnum, sizeof(Elf64_Shdr), size)) {
    error = "malformed ELF: section headers lie outside the image";
    return false;
  }

  bool found = false;
  for (uint64_t i = 0; i < shnum && !found; ++i) {
    auto sh = read_at<Elf64_Shdr>(base, eh.e_shoff + i * sizeof(Elf64_Shdr));
    if (sh.sh_type != SHT_DYNSYM)
      continue;
    found = true;
    if (sh.sh_entsize != sizeof(Elf64_Sym) || !in_bounds(sh.sh_offset, 1, sh.sh_size, size)) {
      error = "malformed ELF: bad dynamic symbol table";
      return false;
    }
    if (sh.sh_link == 0 || sh.sh_link >= shnum) {
      error = "malformed ELF: dynamic symbol table without a string table";
      return false;
    }
    auto strsh = read_at<Elf64_Shdr>(base, eh.e_shoff + sh.sh_link * sizeof(Elf64_Shdr));
    if (strsh.sh_type != SHT_STRTAB || !in_bounds(strsh.sh_offset, 1, strsh.sh_size, size)) {
      error = "malformed ELF: bad dynamic string table";
      return false;
    }
    const char *strtab = reinterpret_cast<const char *>(base + strsh.sh_offset);
    uint64_t count = sh.sh_size / sizeof(Elf64_Sym);
    for (uint64_t s = 1; s < count; ++s) { // entry 0 is the null symbol
      auto sym = read_at<Elf64_Sym>(base, sh.sh_offset + s * sizeof(Elf64_Sym));
      unsigned type = ELF64_ST_TYPE(sym.st_info);
      unsigned bind = ELF64_ST_BIND(sym.st_info);
      unsigned vis = ELF64_ST_VISIBILITY(sym.st_other);
      if (type != STT_FUNC && type != STT_GNU_IFUNC)
        continue;
      if (bind != STB_GLOBAL && bind != STB_WEAK)
        continue;
      if (sym.st_shndx == SHN_UNDEF)
        continue;
      if (vis != STV_DEFAULT && vis != STV_PROTECTED)
        continue;
      if (sym.st_name >= strsh.sh_size)
        continue;
      const char *name = strtab + sym.st_name;
      size_t max = static_cast<size_t>(strsh.sh_size - sym.st_name);
      size_t len = strnlen(name, max);
      if (len == 0 || len == max) // empty or not terminated inside the table
        continue;
      std::string n(name, len);
      if (n == "_init" || n == "_fini")
        continue;
      names.push_back(std::move(n));
    }
  }
  if (!found) {
    error = "the library has no dynamic symbol table (.dynsym): it exports nothing";
    return false;
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return true;
}

} // namespace rfaas::executor_process
