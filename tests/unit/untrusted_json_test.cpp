// JSON that others write (a manifest on a shared disk, a rank's message through the store) holds
// whole numbers only: found by fuzz.manifest and fuzz.group_message, a number such as 1e300 where
// an integer belongs was converted with undefined behaviour (UBSan: "outside the range of
// representable values"); now the document is refused.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "group_message.h"
#include "hydro/manifest.h"

namespace hydro {
namespace {

TEST(UntrustedJson, AManifestWithAFractionWhereAWholeNumberBelongsIsCorruption) {
  Manifest m;
  m.step = 7;
  m.world_size = 1;
  m.files.push_back({"model.pt", 12, 0x1234});
  std::string text = m.to_json();
  Manifest back;
  ASSERT_TRUE(Manifest::parse(text, "m.json", &back).ok());
  const std::string size = "\"size\": 12";
  ASSERT_NE(text.find(size), std::string::npos) << text;
  text.replace(text.find(size), size.size(), "\"size\": 1e300");
  Status s = Manifest::parse(text, "m.json", &back);
  EXPECT_EQ(s.code(), Code::corruption);
  EXPECT_EQ(s.message(), "m.json: a number with a fraction, where hydro writes whole numbers");
}

TEST(UntrustedJson, AMessageWithAFractionIsNoMessage) {
  Status st;
  nlohmann::json body;
  ASSERT_TRUE(decode_message(R"({"code":"ok","message":"","body":{"steps":[4,8]}})", &st, &body));
  EXPECT_FALSE(decode_message(R"({"code":"ok","message":"","body":{"steps":[4.2e87]}})", &st, &body));
  EXPECT_FALSE(decode_message(R"({"code":"ok","message":"","body":0.5})", &st, &body));
}

}  // namespace
}  // namespace hydro
