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
