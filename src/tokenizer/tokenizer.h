#pragma once
// Text <-> token ids from a HuggingFace tokenizer.json, reproducing HF tokenizers exactly for
// DeepSeek-V3's tokenizer shape: added tokens matched in raw text, Split(Regex) pre-tokenizers then
// ByteLevel, byte-level BPE, ByteLevel decoder. Anything else in the file is refused at load time
// rather than approximated. encode() is HF's encode(text, add_special_tokens=False): the
// post_processor (e.g. a BOS template) is not applied; encode_prompt() adds the BOS as
// tokenizer_config.json's add_bos_token says, which is what transformers does for DeepSeek's tokenizers.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace splash {
namespace tok {
class AddedTokens;
class BpeModel;
class PreTokenizer;
}  // namespace tok

class Tokenizer {
 public:
  // splash::Error naming the file when it is missing, not JSON, or of an unsupported shape.
  static std::unique_ptr<Tokenizer> from_file(const std::string& tokenizer_json_path);
  // nullptr when dir has no tokenizer.json.
  static std::unique_ptr<Tokenizer> from_model_dir(const std::string& dir);
  // --tokenizer: a directory holding tokenizer.json, or the file itself; splash::Error when neither.
  static std::unique_ptr<Tokenizer> from_path(const std::string& path);
  ~Tokenizer();

  // allow_special=false leaves special-token text as plain text (for untrusted user content).
  // Invalid UTF-8 in `text` is replaced by U+FFFD first. Thread-safe.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = true) const;
  // A prompt as transformers tokenizes it (add_special_tokens=True): BOS first when
  // tokenizer_config.json has add_bos_token true, unless the text already starts with the BOS (a
  // chat template's own), so it is never doubled.
  std::vector<int32_t> encode_prompt(std::string_view text) const;
  // Unknown ids decode to nothing; invalid UTF-8 in the result becomes U+FFFD, as in HF.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  int32_t vocab_size() const;  // 1 + the largest id of the vocab and the added tokens
  // An added token's content, or a vocab entry in its byte-level spelling (" the" is "Ġthe").
  std::optional<int32_t> token_id(std::string_view token) const;
  bool is_special(int32_t id) const;
  // From tokenizer_config.json next to tokenizer.json when present, else none.
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  bool add_bos() const { return add_bos_ && bos_id_; }
  // No token covers more bytes of text than this, so text longer than n times this cannot fit in n
  // tokens: a bound checked before tokenizing.
  size_t max_token_bytes() const { return max_token_bytes_; }

  // The raw bytes `id` decodes to, possibly part of a UTF-8 character; "" for unknown ids.
  std::string_view token_bytes(int32_t id) const;

 private:
  Tokenizer() = default;
  void load(const std::string& path);
  void load_config(const std::string& config_path);

  std::unique_ptr<tok::AddedTokens> added_;
  std::unique_ptr<tok::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<tok::BpeModel> bpe_;
  std::vector<std::string> bytes_;  // by id: what the ByteLevel decoder makes of the token
  std::vector<bool> special_;       // by id
  std::optional<int32_t> bos_id_, eos_id_;
  bool add_bos_ = false;  // absent from tokenizer_config.json: no BOS (the post_processor is not applied)
  size_t max_token_bytes_ = 1;
};

}  // namespace splash
