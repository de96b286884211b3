#include "resource_manager/grant_journal.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

namespace rfaas::rm {

namespace {

constexpr size_t kHeader = 8;
/// The largest body a record may have: a lease of many parts is a few KiB;
/// a length above this is damage, not a record.
constexpr uint32_t kMaxBody = 1u << 20;
/// Sequence number and kind: the smallest body.
constexpr uint32_t kMinBody = 9;
/// The file's first allocation (about 2,000 records; the journal is
/// emptied at every commit, at most 256 lease writes apart), and the step
/// its allocation grows by, doubling, while the journal is held.
constexpr uint64_t kFirstCapacity = 256 * 1024;
/// Beyond this, an emptied journal gives its space back.
constexpr uint64_t kKeepCapacity = 8 * kFirstCapacity;

/// The offset after the last byte that is not zero: the file's allocation
/// beyond the records is zeros.
size_t data_end(const std::string &data) {
  size_t end = data.size();
  while (end > 0 && data[end - 1] == 0)
    --end;
  return end;
}

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k)
      c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}

void put_u8(std::string &s, uint8_t v) { s.push_back(static_cast<char>(v)); }
void put_u16(std::string &s, uint16_t v) {
  for (int i = 0; i < 2; ++i)
    s.push_back(static_cast<char>(v >> (8 * i)));
}
void put_u32(std::string &s, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    s.push_back(static_cast<char>(v >> (8 * i)));
}
void put_u64(std::string &s, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    s.push_back(static_cast<char>(v >> (8 * i)));
}
void put_text(std::string &s, const std::string &t) {
  // Names are bounded far below 64 KiB by the wire protocol.
  const size_t n = std::min<size_t>(t.size(), UINT16_MAX);
  put_u16(s, static_cast<uint16_t>(n));
  s.append(t, 0, n);
}

uint32_t get_u32(const unsigned char *p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

/// Reads a body's fields; every read is bounds-checked (a body passed its
/// checksum, but it might come from a newer or foreign writer).
class Reader {
public:
  Reader(const unsigned char *p, size_t n) : p_(p), end_(p + n) {}
  bool u8(uint8_t &v) {
    if (end_ - p_ < 1)
      return false;
    v = *p_++;
    return true;
  }
  bool u16(uint16_t &v) {
    if (end_ - p_ < 2)
      return false;
    v = static_cast<uint16_t>(p_[0] | p_[1] << 8);
    p_ += 2;
    return true;
  }
  bool u32(uint32_t &v) {
    if (end_ - p_ < 4)
      return false;
    v = get_u32(p_);
    p_ += 4;
    return true;
  }
  bool u64(uint64_t &v) {
    uint32_t lo = 0, hi = 0;
    if (!u32(lo) || !u32(hi))
      return false;
    v = static_cast<uint64_t>(hi) << 32 | lo;
    return true;
  }
  bool text(std::string &t) {
    uint16_t n = 0;
    if (!u16(n) || end_ - p_ < n)
      return false;
    t.assign(reinterpret_cast<const char *>(p_), n);
    p_ += n;
    return true;
  }
  bool bytes(uint8_t *out, size_t n) {
    if (static_cast<size_t>(end_ - p_) < n)
      return false;
    std::memcpy(out, p_, n);
    p_ += n;
    return true;
  }
  bool done() const { return p_ == end_; }

private:
  const unsigned char *p_;
  const unsigned char *end_;
};

/// The body's last field, Lease::tokens_until_ms, came after the others: a
/// record written before it ends without it (0: not known).
bool tokens_until(Reader &in, Lease &l) {
  l.tokens_until_ms = 0;
  if (in.done())
    return true;
  return in.u64(l.tokens_until_ms) && in.done();
}

bool decode_body(const unsigned char *p, size_t n, GrantJournal::Record &r) {
  Reader in(p, n);
  uint8_t kind = 0, state = 0;
  if (!in.u64(r.seq) || !in.u8(kind) || !in.u64(r.lease.id) || !in.u8(state) ||
      !in.u64(r.lease.expiry_ms) || !in.u64(r.lease.ended_ms))
    return false;
  if (state > static_cast<uint8_t>(LeaseState::NodeDown))
    return false;
  r.lease.state = static_cast<LeaseState>(state);
  if (kind == static_cast<uint8_t>(GrantJournal::Kind::Update)) {
    r.kind = GrantJournal::Kind::Update;
    return tokens_until(in, r.lease);
  }
  if (kind != static_cast<uint8_t>(GrantJournal::Kind::Put))
    return false;
  r.kind = GrantJournal::Kind::Put;
  uint16_t parts = 0;
  if (!in.u64(r.lease.granted_ms) || !in.u32(r.lease.owner_uid) || !in.text(r.lease.client) ||
      !in.text(r.lease.job_id) ||
      !in.bytes(r.lease.secret_hash.data(), r.lease.secret_hash.size()) || !in.u16(parts))
    return false;
  for (uint16_t i = 0; i < parts; ++i) {
    LeasePart part;
    uint16_t cores = 0;
    if (!in.text(part.node) || !in.u64(part.memory_mib) || !in.u16(cores))
      return false;
    part.cores.resize(cores);
    for (uint32_t &c : part.cores)
      if (!in.u32(c))
        return false;
    r.lease.parts.push_back(std::move(part));
  }
  return tokens_until(in, r.lease);
}

/// The record starting at `at` of `data`, if it is whole and its checksum
/// and fields are good; its size goes to `size`.
bool record_at(const std::string &data, size_t at, GrantJournal::Record &r, size_t &size) {
  if (data.size() - at < kHeader)
    return false;
  const auto *p = reinterpret_cast<const unsigned char *>(data.data()) + at;
  const uint32_t body = get_u32(p);
  if (body < kMinBody || body > kMaxBody || data.size() - at - kHeader < body)
    return false;
  if (crc32(p + kHeader, body) != get_u32(p + 4))
    return false;
  r = GrantJournal::Record{};
  if (!decode_body(p + kHeader, body, r))
    return false;
  size = kHeader + body;
  return true;
}

std::string error_text(const char *what, const std::string &path, int err) {
  return std::string(what) + " the grant journal " + path + ": " + std::strerror(err);
}

} // namespace

uint32_t crc32(const void *data, size_t n) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  const auto *p = static_cast<const unsigned char *>(data);
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i)
    c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

GrantJournal::GrantJournal(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd_ < 0)
    throw std::runtime_error(error_text("cannot open", path_, errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    throw std::runtime_error(error_text("cannot stat", path_, err));
  }
  // It holds lease secrets' hashes and owners: no wider than the database.
  if ((st.st_mode & 0077) != 0 && ::fchmod(fd_, 0600) != 0) {
    const int err = errno;
    ::close(fd_);
    throw std::runtime_error(error_text("cannot make 0600", path_, err));
  }
  // Nothing is mapped or allocated yet: a journal found damaged must be
  // left as it is. Records go after the last one there, or after whatever
  // else is there (a torn tail: the Store empties the journal after its
  // replay, before it adds any).
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {
    std::string data;
    try {
      data = read_file();
    } catch (const std::runtime_error &) {
      ::close(fd_);
      throw;
    }
    // The whole records first (the last may end in zero bytes), then
    // anything else that is not the allocation's zeros.
    size_t at = 0;
    Record r;
    for (size_t size = 0; record_at(data, at, r, size);)
      at += size;
    size_ = std::max<uint64_t>(at, data_end(data));
  }
}

GrantJournal::~GrantJournal() {
  if (map_)
    ::munmap(map_, static_cast<size_t>(capacity_));
  if (fd_ >= 0)
    ::close(fd_);
}

bool GrantJournal::reserve(uint64_t bytes, std::string &error) {
  if (map_ && bytes <= capacity_)
    return true;
  uint64_t cap = std::max<uint64_t>(kFirstCapacity, capacity_);
  while (cap < bytes)
    cap *= 2;
  // Allocated, not only sized: a store into a page of a mapped file that
  // the disk cannot hold is a SIGBUS, where a full disk must be an error.
  if (const int err = ::posix_fallocate(fd_, 0, static_cast<off_t>(cap)); err != 0) {
    error = error_text("cannot allocate", path_, err);
    return false;
  }
  void *m = ::mmap(nullptr, static_cast<size_t>(cap), PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (m == MAP_FAILED) {
    error = error_text("cannot map", path_, errno);
    return false;
  }
  if (map_)
    ::munmap(map_, static_cast<size_t>(capacity_));
  map_ = static_cast<unsigned char *>(m);
  capacity_ = cap;
  return true;
}

std::string GrantJournal::encode(uint64_t seq, Kind kind, const Lease &l) {
  std::string body;
  body.reserve(128);
  put_u64(body, seq);
  put_u8(body, static_cast<uint8_t>(kind));
  put_u64(body, l.id);
  put_u8(body, static_cast<uint8_t>(l.state));
  put_u64(body, l.expiry_ms);
  put_u64(body, l.ended_ms);
  if (kind == Kind::Put) {
    put_u64(body, l.granted_ms);
    put_u32(body, l.owner_uid);
    put_text(body, l.client);
    put_text(body, l.job_id);
    body.append(reinterpret_cast<const char *>(l.secret_hash.data()), l.secret_hash.size());
    put_u16(body, static_cast<uint16_t>(std::min<size_t>(l.parts.size(), UINT16_MAX)));
    for (size_t i = 0; i < l.parts.size() && i < UINT16_MAX; ++i) {
      const LeasePart &p = l.parts[i];
      put_text(body, p.node);
      put_u64(body, p.memory_mib);
      put_u16(body, static_cast<uint16_t>(std::min<size_t>(p.cores.size(), UINT16_MAX)));
      for (size_t c = 0; c < p.cores.size() && c < UINT16_MAX; ++c)
        put_u32(body, p.cores[c]);
    }
  }
  put_u64(body, l.tokens_until_ms);
  std::string out;
  out.reserve(kHeader + body.size());
  put_u32(out, static_cast<uint32_t>(body.size()));
  put_u32(out, crc32(body.data(), body.size()));
  out += body;
  return out;
}

void GrantJournal::add(uint64_t seq, Kind kind, const Lease &lease) {
  const size_t before = buffer_.size();
  buffer_ += encode(seq, kind, lease);
  buffered_.emplace_back(seq, buffer_.size() - before);
}

bool GrantJournal::withdraw(uint64_t seq) {
  size_t at = 0;
  for (auto it = buffered_.begin(); it != buffered_.end(); ++it) {
    if (it->first == seq) {
      buffer_.erase(at, it->second);
      buffered_.erase(it);
      return true;
    }
    at += it->second;
  }
  return false;
}

bool GrantJournal::flush(std::string &error) {
  if (buffer_.empty())
    return true;
  // A copy into the mapped file, not a write(2): the kernel's page cache
  // holds it as it would hold a write, so a crash of the process keeps it,
  // and the answers that wait for it leave a microsecond sooner.
  if (!reserve(size_ + buffer_.size(), error))
    return false;
  std::memcpy(map_ + size_, buffer_.data(), buffer_.size());
  size_ += buffer_.size();
  buffer_.clear();
  buffered_.clear();
  return true;
}

void GrantJournal::discard() {
  buffer_.clear();
  buffered_.clear();
}

bool GrantJournal::truncate(std::string &error) {
  if (size_ == 0)
    return true;
  if (!map_ || capacity_ > kKeepCapacity) {
    // Not mapped (nothing was added since the file was opened), or grown
    // large while the journal was held: give the space back.
    if (map_) {
      ::munmap(map_, static_cast<size_t>(capacity_));
      map_ = nullptr;
      capacity_ = 0;
    }
    if (::ftruncate(fd_, 0) != 0) {
      error = error_text("cannot empty", path_, errno);
      return false;
    }
    size_ = 0;
    return true;
  }
  // Zeroed from its end back to its start: a crash half-way leaves whole
  // records (all already in the database, skipped by sequence number)
  // followed by zeros, never zeros followed by records.
  constexpr uint64_t kStep = 4096;
  for (uint64_t end = size_; end > 0;) {
    const uint64_t from = end > kStep ? end - kStep : 0;
    std::memset(map_ + from, 0, static_cast<size_t>(end - from));
    end = from;
  }
  size_ = 0;
  return true;
}

std::string GrantJournal::read_file() const {
  std::string data;
  struct stat st {};
  if (::fstat(fd_, &st) != 0)
    throw std::runtime_error(error_text("cannot stat", path_, errno));
  data.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < data.size()) {
    const ssize_t n = ::pread(fd_, data.data() + got, data.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      throw std::runtime_error(error_text("cannot read", path_, errno));
    if (n == 0)
      break;
    got += static_cast<size_t>(n);
  }
  data.resize(got);
  return data;
}

GrantJournal::Contents GrantJournal::read() const {
  const std::string data = read_file();
  // The allocation beyond the records is zeros: no record, nothing torn.
  const size_t end = data_end(data);
  Contents out;
  size_t at = 0;
  while (at < end) {
    Record r;
    size_t size = 0;
    if (record_at(data, at, r, size) && (out.records.empty() || r.seq > out.records.back().seq)) {
      out.records.push_back(std::move(r));
      at += size;
      continue;
    }
    // Not a good record: a torn tail if no good record follows anywhere
    // after it (a write cut short by a crash of the machine ends the file);
    // otherwise the file was damaged where it had been written whole.
    for (size_t next = at + 1; next + kHeader <= data.size(); ++next) {
      Record later;
      size_t later_size = 0;
      if (record_at(data, next, later, later_size) &&
          (out.records.empty() || later.seq > out.records.back().seq))
        throw GrantJournalError(
            "the grant journal " + path_ + " is damaged: the record at byte " + std::to_string(at) +
            " fails its checksum, and a good record (sequence number " + std::to_string(later.seq) +
            ") follows it at byte " + std::to_string(next) +
            ". Leases it holds may be missing from the database. Keep a copy of it and of the "
            "database; to start with what the database holds, move the journal away");
    }
    out.torn_bytes = end - at;
    break;
  }
  return out;
}

} // namespace rfaas::rm
