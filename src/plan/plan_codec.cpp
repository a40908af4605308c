#include "plan/plan_codec.h"

namespace splash {

void encode_pages(ByteWriter& w, const std::shared_ptr<const SeqPages>& pages) {
  w.put<uint8_t>(pages != nullptr);
  if (!pages) return;
  w.put<int64_t>(pages->tokens);
  w.put<uint64_t>(pages->layers.size());
  for (const std::vector<int32_t>& layer : pages->layers) w.put_vector(layer);
}

std::shared_ptr<const SeqPages> decode_pages(ByteReader& r) {
  if (!r.get<uint8_t>()) return nullptr;
  auto pages = std::make_shared<SeqPages>();
  pages->tokens = r.get<int64_t>();
  pages->layers.resize(r.get_count(sizeof(uint64_t)));
  for (std::vector<int32_t>& layer : pages->layers) layer = r.get_vector<int32_t>();
  return pages;
}

void encode_plan(ByteWriter& w, const StepPlan& p) {
  w.put(p.layout);
  w.put(p.form);
  w.put<int32_t>(p.ranks);
  w.put<uint64_t>(p.seqs.size());
  for (const StepSeq& s : p.seqs) {
    w.put<int64_t>(s.id);
    w.put<int32_t>(s.owner);
    w.put<int64_t>(s.start);
    w.put<int64_t>(s.n_new);
    w.put<uint8_t>(s.logits);
    w.put<uint8_t>(s.greedy);
  }
  w.put_vector(p.tokens);
  w.put<uint8_t>(p.all_logits);
  w.put_vector(p.positions);
  w.put_vector(p.seq_of_row);
  w.put<uint64_t>(p.rows_of_owner.size());
  for (const std::vector<int32_t>& rows : p.rows_of_owner) w.put_vector(rows);
  w.put<uint64_t>(p.pages.size());
  for (const auto& rank_pages : p.pages) {
    w.put<uint64_t>(rank_pages.size());
    for (const auto& pages : rank_pages) encode_pages(w, pages);
  }
  w.put<int32_t>(p.page_size);
  w.put<uint64_t>(p.page_copies.size());
  for (const auto& copies : p.page_copies) {
    std::vector<int32_t> flat;  // source, destination, ...
    for (const auto& [src, dst] : copies) flat.insert(flat.end(), {src, dst});
    w.put_vector(flat);
  }
}

StepPlan decode_plan(ByteReader& r) {
  StepPlan p;
  p.layout = r.get<Layout>();
  p.form = r.get<AttnForm>();
  p.ranks = r.get<int32_t>();
  p.seqs.resize(r.get_count(8));
  for (StepSeq& s : p.seqs) {
    s.id = r.get<int64_t>();
    s.owner = r.get<int32_t>();
    s.start = r.get<int64_t>();
    s.n_new = r.get<int64_t>();
    s.logits = r.get<uint8_t>() != 0;
    s.greedy = r.get<uint8_t>() != 0;
  }
  p.tokens = r.get_vector<int32_t>();
  p.all_logits = r.get<uint8_t>() != 0;
  p.positions = r.get_vector<int32_t>();
  p.seq_of_row = r.get_vector<int32_t>();
  p.rows_of_owner.resize(r.get_count(sizeof(uint64_t)));
  for (std::vector<int32_t>& rows : p.rows_of_owner) rows = r.get_vector<int32_t>();
  p.pages.resize(r.get_count(sizeof(uint64_t)));
  for (auto& rank_pages : p.pages) {
    rank_pages.resize(r.get_count(1));
    for (auto& pages : rank_pages) pages = decode_pages(r);
  }
  p.page_size = r.get<int32_t>();
  p.page_copies.resize(r.get_count(sizeof(uint64_t)));
  for (auto& copies : p.page_copies) {
    const std::vector<int32_t> flat = r.get_vector<int32_t>();
    if (flat.size() % 2) fail_internal("a page copy list of odd length {}", flat.size());
    for (size_t i = 0; i < flat.size(); i += 2) copies.emplace_back(flat[i], flat[i + 1]);
  }
  return p;
}

}  // namespace splash
