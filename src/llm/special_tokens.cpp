// special_tokens.cpp — end-of-generation tokens and type overrides by token
// text (special_tokens.hpp).
#include "special_tokens.hpp"

#include <algorithm>
#include <span>
#include <string_view>
#include <utility>

namespace tessera::llm {

namespace {

using texts = std::span<const std::string_view>;

// U+FF5C FULLWIDTH VERTICAL LINE and U+2581 (DeepSeek's special tokens).
#define TSR_FW_BAR "\xEF\xBD\x9C"
#define TSR_LOWER_BLOCK "\xE2\x96\x81"

// Texts that end generation wherever they are in the vocabulary.
constexpr std::string_view k_end_texts[] = {
    "<|eot_id|>",  "<|im_end|>",  "<|end|>",  "<|return|>",         "<|call|>", "<|flush|>",       "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>",   "<|eom_id|>",         "<EOT>",    "_<EOT>",          "[EOT]",
    "[EOS]",       "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "[e~[",
    "<" TSR_FW_BAR "end" TSR_LOWER_BLOCK "of" TSR_LOWER_BLOCK "sentence" TSR_FW_BAR ">",
};

// Fill-in-the-middle roles whose token ends generation, by text.
constexpr std::string_view k_fim_pad_texts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
constexpr std::string_view k_fim_rep_texts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
constexpr std::string_view k_fim_sep_texts[] = {"<|file_sep|>"};

// Other texts the reference makes control tokens (end of turn/message
// candidates and the other fill-in-the-middle roles).
constexpr std::string_view k_control_texts[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<" TSR_FW_BAR "fim" TSR_LOWER_BLOCK "begin" TSR_FW_BAR ">",
    "<PRE>", TSR_LOWER_BLOCK "<PRE>", "<|code_prefix|>", "<|prefix|>",
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<" TSR_FW_BAR "fim" TSR_LOWER_BLOCK "hole" TSR_FW_BAR ">",
    "<SUF>", TSR_LOWER_BLOCK "<SUF>", "<|code_suffix|>", "<|suffix|>",
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<" TSR_FW_BAR "fim" TSR_LOWER_BLOCK "end" TSR_FW_BAR ">",
    "<MID>", TSR_LOWER_BLOCK "<MID>", "<|code_middle|>", "<|middle|>",
};

// gpt-oss's tokens that are always printed.
constexpr std::string_view k_user_defined_texts[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};

#undef TSR_FW_BAR
#undef TSR_LOWER_BLOCK

bool in(texts list, std::string_view s) { return std::find(list.begin(), list.end(), s) != list.end(); }

} // namespace

std::vector<uint8_t> classify_special_tokens(const std::vector<std::string> & tokens, std::vector<token_type> & types,
                                             special_ids ids) {
    const size_t n = tokens.size();
    std::vector<uint8_t> eog(n, 0);
    const auto make_control = [&](size_t i) {
        if (types[i] != token_type::control) types[i] = token_type::control;
    };
    // Fill-in-the-middle roles: the key's id, else the lowest id with a text.
    const std::pair<token_id, texts> fim_roles[] = {
        {ids.fim_pad, k_fim_pad_texts}, {ids.fim_rep, k_fim_rep_texts}, {ids.fim_sep, k_fim_sep_texts}};
    for (const auto & [key_id, list] : fim_roles) {
        token_id id = key_id;
        for (size_t i = 0; i < n && id < 0; ++i) {
            if (in(list, tokens[i])) id = static_cast<token_id>(i);
        }
        if (id >= 0) {
            eog[static_cast<size_t>(id)] = 1;
            if (in(list, tokens[static_cast<size_t>(id)])) make_control(static_cast<size_t>(id));
        }
    }
    for (size_t i = 0; i < n; ++i) {
        const std::string & t = tokens[i];
        if (in(k_end_texts, t)) {
            eog[i] = 1;
            make_control(i);
        } else if (in(k_control_texts, t)) {
            make_control(i);
        }
        if (in(k_user_defined_texts, t)) types[i] = token_type::user_defined;
    }
    for (const token_id id : {ids.eos, ids.eot, ids.eom}) {
        if (id >= 0) eog[static_cast<size_t>(id)] = 1;
    }
    // Exceptions, among the tokens that end generation so far.
    const auto find_eog = [&](std::string_view text) -> token_id {
        for (size_t i = 0; i < n; ++i) {
            if (eog[i] != 0 && tokens[i] == text) return static_cast<token_id>(i);
        }
        return -1;
    };
    const bool has_return = find_eog("<|return|>") >= 0, has_flush = find_eog("<|flush|>") >= 0;
    const bool has_call = find_eog("<|call|>") >= 0 || find_eog("<|calls|>") >= 0;
    if (const token_id end = find_eog("<|end|>"); end >= 0 && has_call && (has_return || has_flush)) {
        eog[static_cast<size_t>(end)] = 0;
        types[static_cast<size_t>(end)] = token_type::user_defined;
    }
    if (const token_id s = find_eog("</s>"); s >= 0 && find_eog("<|tool_response>") >= 0) {
        eog[static_cast<size_t>(s)] = 0;
        types[static_cast<size_t>(s)] = token_type::normal;
    }
    return eog;
}

} // namespace tessera::llm
