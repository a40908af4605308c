// Stop strings in streamed text: holdback of partial matches, matches across pushes, flush.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "engine/stop_checker.h"

namespace splash {
namespace {

// Everything emitted (plus the flush when no stop matched), and the matched stop ("" when none).
using Outcome = std::pair<std::string, std::string>;

Outcome run(std::vector<std::string> stops, const std::vector<std::string>& chunks) {
  StopChecker checker(std::move(stops));
  std::string out;
  for (const std::string& c : chunks) {
    const StopChecker::Result r = checker.push(c);
    out += r.emit;
    if (r.stopped) return {out, r.matched};
  }
  return {out + checker.flush(), ""};
}

TEST(StopChecker, NoStopsPassesTextThrough) {
  StopChecker checker({});
  const StopChecker::Result r = checker.push("hello");
  EXPECT_EQ(r.emit, "hello");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(checker.flush(), "");
}

TEST(StopChecker, StopInOnePushIsCutBeforeTheStop) {
  StopChecker checker({"wor"});
  const StopChecker::Result r = checker.push("hello world");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "hello ");
  EXPECT_EQ(r.matched, "wor");
  // After a stop nothing more comes out.
  EXPECT_EQ(checker.push("more").emit, "");
  EXPECT_TRUE(checker.push("more").stopped);
  EXPECT_EQ(checker.flush(), "");
}

TEST(StopChecker, StopSpanningSeveralPushes) {
  StopChecker checker({"<|end|>"});
  StopChecker::Result r = checker.push("answer <|");
  EXPECT_EQ(r.emit, "answer ");
  EXPECT_FALSE(r.stopped);
  r = checker.push("en");
  EXPECT_EQ(r.emit, "");
  EXPECT_FALSE(r.stopped);
  r = checker.push("d|> trailing");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "");
  EXPECT_EQ(r.matched, "<|end|>");
}

TEST(StopChecker, HeldPrefixIsReleasedWhenItStopsMatching) {
  StopChecker checker({"abc"});
  EXPECT_EQ(checker.push("xxab").emit, "xx");
  const StopChecker::Result r = checker.push("d");
  EXPECT_EQ(r.emit, "abd");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(checker.flush(), "");
}

TEST(StopChecker, SelfOverlappingStop) {
  // "aaab" contains "aab" starting at 1; the held "aa" must slide, not reset.
  EXPECT_EQ(run({"aab"}, {"a", "a", "a", "b", "zz"}), (Outcome{"a", "aab"}));
  EXPECT_EQ(run({"abab"}, {"ab", "a", "bab"}), (Outcome{"", "abab"}));
}

TEST(StopChecker, OverlappingPrefixesShorterCompletesFirst) {
  // "ab" completes before "abc" could, however the text is chunked.
  StopChecker checker({"abc", "ab"});
  EXPECT_EQ(checker.push("xa").emit, "x");
  const StopChecker::Result r = checker.push("bc");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "");
  EXPECT_EQ(r.matched, "ab");
  EXPECT_EQ(run({"abc", "ab"}, {"xabc"}), (Outcome{"x", "ab"}));
  // "abc" vs "abd": the held "ab" is kept for both and released when neither can match.
  EXPECT_EQ(run({"abc", "abd"}, {"ab", "e"}), (Outcome{"abe", ""}));
  EXPECT_EQ(run({"abc", "abd"}, {"ab", "d"}), (Outcome{"", "abd"}));
}

TEST(StopChecker, MultipleStopsEarliestWins) {
  EXPECT_EQ(run({"world", "lo"}, {"hello world"}), (Outcome{"hel", "lo"}));
  EXPECT_EQ(run({"lo", "world"}, {"hel", "lo world"}),
            (Outcome{"hel", "lo"}));
  // Same end: the longer (earlier-starting) one is cut.
  EXPECT_EQ(run({"b", "ab"}, {"xab"}), (Outcome{"x", "ab"}));
}

TEST(StopChecker, FlushReturnsHeldTextWithoutFalseHoldback) {
  StopChecker checker({"\n\n", "END"});
  EXPECT_EQ(checker.push("line\n").emit, "line");
  EXPECT_EQ(checker.push("E").emit, "\n");
  EXPECT_EQ(checker.push("N").emit, "");
  EXPECT_EQ(checker.flush(), "EN");
  EXPECT_EQ(checker.flush(), "");
  // Text that cannot start a stop string is never held.
  StopChecker plain({"END"});
  EXPECT_EQ(plain.push("the end").emit, "the end");
  EXPECT_EQ(plain.flush(), "");
}

TEST(StopChecker, MultibyteStopStrings) {
  EXPECT_EQ(run({"。\n"}, {"你好", "。", "\n再见"}),
            (Outcome{"你好", "。\n"}));
  EXPECT_EQ(run({"。\n"}, {"你好", "。", "再见"}), (Outcome{"你好。再见", ""}));
}

TEST(StopChecker, ResultDoesNotDependOnChunking) {
  const std::vector<std::string> stops = {"abc", "bcd", "cc", "dab"};
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    for (int i = 0; i < 12; ++i) text += static_cast<char>('a' + rng() % 4);
    const auto whole = run(stops, {text});
    std::vector<std::string> bytes;
    for (char c : text) bytes.emplace_back(1, c);
    EXPECT_EQ(run(stops, bytes), whole) << text;
    std::vector<std::string> chunks;
    for (size_t i = 0; i < text.size();) {
      const size_t len = 1 + rng() % 4;
      chunks.push_back(text.substr(i, len));
      i += len;
    }
    EXPECT_EQ(run(stops, chunks), whole) << text;
    // The emitted text is the prefix before the first completed stop string.
    if (!whole.second.empty()) {
      EXPECT_EQ(text.substr(0, whole.first.size()) + whole.second,
                text.substr(0, whole.first.size() + whole.second.size()));
    } else {
      EXPECT_EQ(whole.first, text);
    }
  }
}

// min_tokens: a stop string completed while stops are suppressed is passed over, also when it is
// still held back; one that completes after is found.
TEST(StopChecker, SuppressedStopsAreNotMatchedLater) {
  StopChecker checker({"ab", "abcab"});
  StopChecker::Result r = checker.push("xab", /*can_stop=*/false);
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.emit, "x");  // "ab" may still grow into "abcab"
  r = checker.push("c");  // the held "ab" ended while suppressed
  EXPECT_FALSE(r.stopped);
  r = checker.push("a");
  EXPECT_FALSE(r.stopped);
  r = checker.push("b");
  ASSERT_TRUE(r.stopped);
  EXPECT_EQ(r.matched, "abcab");  // ends with the new "ab": the longer wins
  EXPECT_EQ(r.emit, "");
}

TEST(StopChecker, SuppressedThenArmedMatchesNewText) {
  StopChecker checker({"end"});
  EXPECT_EQ(checker.push("the end. ", false).emit, "the end. ");
  const StopChecker::Result r = checker.push("The end");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "The ");
}

}  // namespace
}  // namespace splash
