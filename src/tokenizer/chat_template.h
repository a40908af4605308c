#pragma once
// DeepSeek-V3's chat format (the Jinja template of its tokenizer_config.json, without tool calls),
// rendered directly so serving needs no template engine.
#include <string>
#include <string_view>
#include <vector>

namespace splash {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// The template's variables (and transformers' continue_final_message).
struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  // The last message, an assistant's, stays open for the model to continue: no end-of-sentence
  // after it and no generation prompt.
  bool continue_final_message = false;
  std::string_view bos_token = "<｜begin▁of▁sentence｜>";
};

// bos, the system messages' contents (joined by "\n\n" as the official template does), then
// "<｜User｜>" + content per user message and "<｜Assistant｜>" + content + "<｜end▁of▁sentence｜>" per
// assistant message, then "<｜Assistant｜>" when add_generation_prompt. Other roles, or
// continue_final_message with a last message that is not an assistant's: splash::Error.
std::string apply_deepseek_v3_chat_template(const std::vector<ChatMessage>& messages,
                                            const ChatTemplateOptions& options = {});

}  // namespace splash
