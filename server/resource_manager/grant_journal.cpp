#include "resource_manager/grant_journal.hpp"

#include <fcntl.h>
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
    return in.done();
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
  return in.done();
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
  // O_APPEND: every write lands at the end whatever the offset, and a
  // write of one buffer is never interleaved with anything.
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
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
  size_ = static_cast<uint64_t>(st.st_size);
}

GrantJournal::~GrantJournal() {
  if (fd_ >= 0)
    ::close(fd_);
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
  const ssize_t n = ::write(fd_, buffer_.data(), buffer_.size());
  if (n == static_cast<ssize_t>(buffer_.size())) {
    size_ += buffer_.size();
    buffer_.clear();
    buffered_.clear();
    return true;
  }
  const int err = n < 0 ? errno : ENOSPC; // a short write: the disk filled up
  error = error_text("cannot write", path_, err);
  // A partial record left before the next write's records would read as
  // damage in the middle: cut it off.
  if (n > 0 && ::ftruncate(fd_, static_cast<off_t>(size_)) != 0)
    error +=
        std::string(" (and cutting back its partial record failed: ") + std::strerror(errno) + ")";
  return false;
}

void GrantJournal::discard() {
  buffer_.clear();
  buffered_.clear();
}

bool GrantJournal::truncate(std::string &error) {
  if (size_ == 0)
    return true;
  if (::ftruncate(fd_, 0) != 0) {
    error = error_text("cannot empty", path_, errno);
    return false;
  }
  size_ = 0;
  return true;
}

GrantJournal::Contents GrantJournal::read() const {
  std::string data;
  {
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
  }
  Contents out;
  size_t at = 0;
  while (at < data.size()) {
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
    out.torn_bytes = data.size() - at;
    break;
  }
  return out;
}

} // namespace rfaas::rm
