#include "tokenizer/chat_template.h"

#include "core/error.h"

namespace splash {

std::string apply_deepseek_v3_chat_template(const std::vector<ChatMessage>& messages,
                                            const ChatTemplateOptions& options) {
  const bool open_last = options.continue_final_message;
  if (open_last && (messages.empty() || messages.back().role != "assistant"))
    fail("continue_final_message needs an assistant message last");
  std::string system;
  bool first_system = true;
  for (const ChatMessage& m : messages) {
    if (m.role != "system") continue;
    if (!first_system) system += "\n\n";
    system += m.content;
    first_system = false;
  }
  std::string out(options.bos_token);
  out += system;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system") continue;
    if (m.role == "user") {
      out += "<｜User｜>";
      out += m.content;
    } else if (m.role == "assistant") {
      out += "<｜Assistant｜>";
      out += m.content;
      if (!(open_last && i + 1 == messages.size())) out += "<｜end▁of▁sentence｜>";
    } else {
      fail("chat message {} has role '{}'; the DeepSeek-V3 template supports system, user and assistant",
           i, m.role);
    }
  }
  if (options.add_generation_prompt && !open_last) out += "<｜Assistant｜>";
  return out;
}

}  // namespace splash
