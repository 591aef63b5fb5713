// cleave::Error and its kinds (cleave/core/error.h): which macro throws which kind, and every kind
// is caught as cleave::Error.
#include "cleave/core/error.h"

#include <gtest/gtest.h>

#include "testing/gradcheck.h"

namespace cleave {
namespace {

void check_positive(int value) { CLEAVE_CHECK_ARG(value > 0, "value is {}; expected > 0", value); }

TEST(Error, ArgumentChecksAreInvalidArgument) {
  EXPECT_ERROR_KIND(check_positive(-3), ErrorKind::kInvalidArgument, "value is -3; expected > 0");
  EXPECT_ERROR_KIND(CLEAVE_FAIL("bad {}", 1), ErrorKind::kInvalidArgument, "bad 1");
  EXPECT_EQ(Error("plain").kind(), ErrorKind::kInvalidArgument);
}

TEST(Error, UnavailableAndUnimplementedHaveTheirKind) {
  EXPECT_ERROR_KIND(CLEAVE_UNAVAILABLE("peer {} is gone", 2), ErrorKind::kUnavailable,
                    "peer 2 is gone");
  EXPECT_ERROR_KIND(CLEAVE_UNIMPLEMENTED("backend '{}'", "hccl"), ErrorKind::kUnimplemented,
                    "backend 'hccl'");
  EXPECT_EQ(Error(ErrorKind::kUnavailable, "m").kind(), ErrorKind::kUnavailable);
}

TEST(Error, EveryKindIsCaughtAsError) {
  for (ErrorKind kind :
       {ErrorKind::kInvalidArgument, ErrorKind::kUnavailable, ErrorKind::kUnimplemented}) {
    try {
      throw Error(kind, "message");
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind);
      EXPECT_STREQ(e.what(), "message");
    }
  }
}

TEST(Error, KindNames) {
  EXPECT_STREQ(error_kind_name(ErrorKind::kInvalidArgument), "invalid argument");
  EXPECT_STREQ(error_kind_name(ErrorKind::kUnavailable), "unavailable");
  EXPECT_STREQ(error_kind_name(ErrorKind::kUnimplemented), "unimplemented");
}

}  // namespace
}  // namespace cleave
