#include "tokenizer/chat_template.h"

#include "core/error.h"

namespace splash {

std::string apply_deepseek_v3_chat_template(const std::vector<ChatMessage>& messages,
                                            bool add_generation_prompt, std::string_view bos_token) {
  std::string system;
  bool first_system = true;
  for (const ChatMessage& m : messages) {
    if (m.role != "system") continue;
    if (!first_system) system += "\n\n";
    system += m.content;
    first_system = false;
  }
  std::string out(bos_token);
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
      out += "<｜end▁of▁sentence｜>";
    } else {
      fail("chat message {} has role '{}'; the DeepSeek-V3 template supports system, user and assistant",
           i, m.role);
    }
  }
  if (add_generation_prompt) out += "<｜Assistant｜>";
  return out;
}

}  // namespace splash
