// The grant journal: an append-only file beside the database
// (`<database>-grants`) that makes a lease's write durable with one copy into a mapped file
// instead of a SQLite commit.
//
// Why: a commit costs the resource manager about half of its CPU time per
// lease (the log's pages written with pwrite, the file locks taken and
// dropped with fcntl). A compact record of a lease's grant, renewal or end
// goes to this journal, and its SQL runs after the answer left, in the
// store's open transaction (Store::apply_pending); the store commits the
// transaction later (at most
// Store::kDeferAtMostMs later), storing in it the journal's last sequence
// number, and empties the journal. The answer to the client leaves once
// the record is written: a crash of the process keeps it (the kernel holds
// the write, as it holds SQLite's log at synchronous=NORMAL), and the next
// start replays the records the database lacks. The file is allocated
// ahead (posix_fallocate) and mapped: a flush is a copy into the mapping,
// as durable against a crash of the process as a write(2) and without its
// system call; the allocation beyond the records is zeros, and emptying the
// journal zeroes what it held.
//
// Record layout (little-endian): u32 body length, u32 CRC-32 of the body,
// then the body: u64 sequence number, u8 kind, and the lease's fields (see
// grant_journal.cpp). Sequence numbers grow by one per record and never
// restart, so that a record the database already holds (a crash between
// the commit and the truncation) is recognised and skipped.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "resource_manager/lease.hpp"

namespace rfaas::rm {

/// The journal file is damaged in a way that dropping a torn tail cannot
/// explain (a record that fails its checksum with valid records after it).
class GrantJournalError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

class GrantJournal {
public:
  /// What a record redoes: Put is Store::put_lease (the lease and its
  /// parts), Update is Store::update_lease (state, expiry and end).
  enum class Kind : uint8_t { Put = 1, Update = 2 };

  struct Record {
    uint64_t seq = 0;
    Kind kind = Kind::Put;
    Lease lease;
  };

  /// What read() found.
  struct Contents {
    std::vector<Record> records;
    /// Bytes dropped after the last whole record (a torn write).
    uint64_t torn_bytes = 0;
  };

  /// Opens, creating it with mode 0600 if needed, the journal at `path`
  /// for appending. Throws std::runtime_error naming the file.
  explicit GrantJournal(std::string path);
  ~GrantJournal();
  GrantJournal(const GrantJournal &) = delete;
  GrantJournal &operator=(const GrantJournal &) = delete;

  const std::string &path() const { return path_; }

  /// Every whole record in the file, in order. A tail that is not a whole
  /// record with a good checksum, and is followed by none, is dropped
  /// (counted in torn_bytes; the file is left as it is). Throws
  /// GrantJournalError for a bad record followed by a good one.
  Contents read() const;

  /// Adds a record to the buffer (nothing is written yet).
  void add(uint64_t seq, Kind kind, const Lease &lease);
  /// Records in the buffer.
  size_t buffered() const { return buffered_.size(); }
  /// Takes the buffered record numbered `seq` out of the buffer, as if it
  /// had never been added: its write was undone and its client told so
  /// before anything was written. False when no buffered record has it.
  bool withdraw(uint64_t seq);
  /// Copies the buffer into the mapped file after its records and empties
  /// it. On failure (the file cannot be allocated further: a full disk, or
  /// mapped) returns false with the reason in `error` and keeps the buffer;
  /// nothing is written then.
  bool flush(std::string &error);
  /// Empties the buffer without writing it (its writes were committed).
  void discard();
  /// Bytes of records in the file (as this process wrote them).
  uint64_t file_bytes() const { return size_; }
  /// Empties the journal (everything it held is committed): zeroes its
  /// records, or cuts the file to nothing when it is not mapped or has
  /// grown large. False with the reason in `error` on failure.
  bool truncate(std::string &error);

  /// Encodes one record (header included): for tests that write a journal.
  static std::string encode(uint64_t seq, Kind kind, const Lease &lease);

private:
  /// Maps the file with room for `bytes`, allocating it further (doubling)
  /// as needed. False with the reason in `error` on failure.
  bool reserve(uint64_t bytes, std::string &error);
  /// The whole file, as it is on disk.
  std::string read_file() const;

  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  unsigned char *map_ = nullptr;
  uint64_t capacity_ = 0;
  std::string buffer_;
  /// Each buffered record's sequence number and size, in buffer order.
  std::vector<std::pair<uint64_t, size_t>> buffered_;
};

/// CRC-32 (IEEE 802.3, the polynomial zlib uses) of `n` bytes at `p`.
uint32_t crc32(const void *p, size_t n);

} // namespace rfaas::rm
