#include <rdmalib/errors.hpp>

#include <set>
#include <string>

#include <gtest/gtest.h>

using namespace rdmalib;

TEST(StatusNames, EachStatusHasItsName) {
  EXPECT_STREQ(to_string(Status::Ok), "ok");
  EXPECT_STREQ(to_string(Status::Again), "again");
  EXPECT_STREQ(to_string(Status::Timeout), "timeout");
  EXPECT_STREQ(to_string(Status::Closed), "closed");
  EXPECT_STREQ(to_string(Status::Unsupported), "unsupported");
  EXPECT_STREQ(to_string(Status::InvalidArgument), "invalid_argument");
  EXPECT_STREQ(to_string(Status::Cancelled), "cancelled");
  EXPECT_STREQ(to_string(Status::Error), "error");
}

TEST(StatusNames, NamesAreDistinct) {
  std::set<std::string> names;
  for (int s = int(Status::Ok); s <= int(Status::Error); ++s)
    names.insert(to_string(static_cast<Status>(s)));
  EXPECT_EQ(names.size(), size_t(int(Status::Error) + 1));
}

TEST(StatusNames, OutOfRangeValueDoesNotCrash) {
  EXPECT_STREQ(to_string(static_cast<Status>(200)), "unknown");
}

TEST(ErrorType, CarriesKindMessageAndCode) {
  Error e(ErrorKind::Refused, "connect to 127.0.0.1:1 refused", 111);
  EXPECT_EQ(e.kind(), ErrorKind::Refused);
  EXPECT_EQ(e.backend_code(), 111);
  EXPECT_STREQ(e.what(), "connect to 127.0.0.1:1 refused");
  const std::runtime_error &base = e;
  EXPECT_STREQ(base.what(), "connect to 127.0.0.1:1 refused");
}

// Every enumeration has one spelling: to_string writes it and the matching
// parse function reads it back, and nothing else.
TEST(Errors, StatusNamesRoundTrip) {
  for (Status s : {Status::Ok, Status::Again, Status::Timeout, Status::Closed, Status::Unsupported,
                   Status::InvalidArgument, Status::Cancelled, Status::Error}) {
    Status back = s == Status::Ok ? Status::Error : Status::Ok;
    EXPECT_TRUE(parse_status(to_string(s), back)) << to_string(s);
    EXPECT_EQ(back, s) << to_string(s);
  }
  Status untouched = Status::Timeout;
  for (const char *bad : {"", "OK", "unknown", "invalid-argument"}) {
    EXPECT_FALSE(parse_status(bad, untouched)) << bad;
    EXPECT_EQ(untouched, Status::Timeout);
  }
}

TEST(Errors, ErrorKindNamesRoundTrip) {
  std::set<std::string> seen;
  for (ErrorKind k :
       {ErrorKind::Config, ErrorKind::NotFound, ErrorKind::Unsupported, ErrorKind::Timeout,
        ErrorKind::Refused, ErrorKind::Closed, ErrorKind::Backend}) {
    EXPECT_TRUE(seen.insert(to_string(k)).second) << "two kinds spelled " << to_string(k);
    ErrorKind back = k == ErrorKind::Config ? ErrorKind::Backend : ErrorKind::Config;
    EXPECT_TRUE(parse_error_kind(to_string(k), back)) << to_string(k);
    EXPECT_EQ(back, k) << to_string(k);
  }
  EXPECT_STREQ(to_string(ErrorKind::NotFound), "not_found");
  ErrorKind untouched = ErrorKind::Refused;
  for (const char *bad : {"", "Config", "not-found", "error"}) {
    EXPECT_FALSE(parse_error_kind(bad, untouched)) << bad;
    EXPECT_EQ(untouched, ErrorKind::Refused);
  }
}
