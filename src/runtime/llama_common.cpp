// llama_common.cpp — see llama_common.h. C++ stays inside this file: exceptions end here as errors.
#include "llama_common.h"
#include "../util/gbnf.h"

#include "chat.h"
#include "json-schema-to-grammar.h"
#include "json.h"
#include "llama.h"
#include "log.h"
/* llama.cpp's grammar from inside (installed by scripts/llama.sh from the pinned tree): the public
 * sampler cannot say how many parse states it holds, and that is what must be bounded. */
#include "llama-grammar.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace {

void set_err(char *err, size_t errlen, const char *what, const char *detail) {
    if (!err || errlen == 0) return;
    std::snprintf(err, errlen, "%s%s%s", what, detail && *detail ? ": " : "", detail ? detail : "");
    for (char *c = err; *c; c++) // one line: the converter's messages may span several
        if (*c == '\n' || *c == '\r') *c = ' ';
}

/* common's Jinja errors read "---- While executing X at line L, column C in source: ... ^ Error: WHY":
 * the reason first, then where. Other messages as they are. */
std::string jinja_reason(const std::string &what) {
    if (what == "std::exception") return "";
    size_t e = what.rfind("Error: ");
    if (e == std::string::npos) return what;
    std::string out = what.substr(e + 7);
    size_t at = what.find(" at line ");
    size_t in = what.find(" in source", at == std::string::npos ? 0 : at);
    if (at != std::string::npos && in != std::string::npos) out += " (" + what.substr(at + 4, in - at - 4) + ")";
    return out;
}

char *dup(const std::string &s) {
    char *c = static_cast<char *>(std::malloc(s.size() + 1));
    if (c) std::memcpy(c, s.c_str(), s.size() + 1);
    return c;
}

/* Runs f, whose failures end here: out of memory, or `what` with the exception's reason (a Jinja
 * error's reason first). Returns f's pointer, or nullptr with err set. */
template <class F> auto guarded(char *err, size_t errlen, const char *what, F &&f) -> decltype(f()) {
    try {
        return f();
    } catch (const std::bad_alloc &) {
        set_err(err, errlen, "out of memory", nullptr);
    } catch (const std::exception &e) {
        set_err(err, errlen, what, jinja_reason(e.what()).c_str());
    } catch (...) {
        set_err(err, errlen, what, nullptr);
    }
    return nullptr;
}

/* A malloc'd copy of s, or nullptr with err set. */
char *dup_or_err(const std::string &s, char *err, size_t errlen) {
    char *c = dup(s);
    if (!c) set_err(err, errlen, "out of memory", nullptr);
    return c;
}

} // namespace

extern "C" char *cb_common_schema_to_grammar(const char *schema, char *err, size_t errlen) {
    return guarded(err, errlen, "the schema cannot be turned into a grammar", [&]() -> char * {
        common_json j;
        try {
            j = common_json::parse(schema ? schema : "");
        } catch (const common_json_error &e) {
            set_err(err, errlen, "the schema is not JSON", e.what());
            return nullptr;
        }
        return dup_or_err(json_schema_to_grammar(j, true), err, errlen);
    });
}

struct cb_chat_templates {
    common_chat_templates_ptr t;
    std::string source;
    cb_common_thinking thinking;
};

namespace {

/* What t does with reasoning: a chat of one user message rendered with and without thinking. A
 * template common cannot analyse (it raises for such a chat, or its format is not found) does not
 * think, as far as this server can read. */
cb_common_thinking thinking_of(const common_chat_templates *t, const std::string &source) {
    cb_common_thinking th = {false, false, false};
    try {
        common_chat_templates_inputs in;
        in.use_jinja = in.add_generation_prompt = true;
        in.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;
        common_chat_msg m;
        m.role = "user", m.content = "test";
        in.messages = {m};
        common_chat_params on = common_chat_templates_apply(t, in);
        th.thinks = on.supports_thinking && !on.thinking_start_tag.empty() && !on.thinking_end_tags.empty();
        in.enable_thinking = false;
        in.force_pure_content = true;
        th.can_switch = th.thinks && common_chat_templates_apply(t, in).prompt != on.prompt;
    } catch (const std::bad_alloc &) {
        throw;
    } catch (const std::exception &) {
        th.thinks = th.can_switch = false;
    }
    th.takes_effort = th.thinks && source.find("reasoning_effort") != std::string::npos;
    return th;
}

} // namespace

extern "C" cb_chat_templates *cb_common_templates_new(const struct llama_model *model, const char *override, char *err,
                                                      size_t errlen) {
    if (err && errlen) err[0] = '\0';
    static std::once_flag quiet; /* common logs its warnings itself; the errors come back here */
    std::call_once(quiet, [] { common_log_set_verbosity_thold(-1); });
    if (!override && !llama_model_chat_template(model, nullptr)) return nullptr;
    return guarded(err, errlen, "the chat template does not parse", [&]() -> cb_chat_templates * {
        std::unique_ptr<cb_chat_templates> c(new cb_chat_templates());
        c->t = common_chat_templates_init(model, override ? override : "");
        c->source = common_chat_templates_source(c->t.get());
        c->thinking = thinking_of(c->t.get(), c->source);
        return c.release();
    });
}

extern "C" void cb_common_templates_free(cb_chat_templates *t) { delete t; }

extern "C" const char *cb_common_template_source(const cb_chat_templates *t) { return t->source.c_str(); }

extern "C" const cb_common_thinking *cb_common_template_thinking(const cb_chat_templates *t) { return &t->thinking; }

namespace {

/* A malloc'd array of malloc'd copies of v (nullptr for none); throws bad_alloc when out of memory. */
char **dup_all(const std::vector<std::string> &v, size_t *n) {
    *n = 0;
    if (v.empty()) return nullptr;
    char **a = static_cast<char **>(std::calloc(v.size(), sizeof(char *)));
    if (!a) throw std::bad_alloc();
    for (const auto &x : v) {
        if (!(a[*n] = dup(x))) throw std::bad_alloc();
        (*n)++;
    }
    return a;
}

char *dup_or_throw(const std::string &s) {
    char *c = dup(s);
    if (!c) throw std::bad_alloc();
    return c;
}

/* s defused (llama_common.h), counting in *n the strings that changed; throws when memory runs out. */
std::string defused(const cb_common_defuse *d, const std::string &s, size_t *n) {
    if (!d) return s;
    bool failed = false;
    char *t = d->text(d->ctx, s.data(), s.size(), &failed);
    if (failed) throw std::bad_alloc();
    if (!t) return s;
    std::string out(t);
    std::free(t);
    (*n)++;
    return out;
}

/* Every string and key of j defused. */
void defuse_json(const cb_common_defuse *d, common_json &j, size_t *n) {
    if (!d) return;
    if (j.is_string()) {
        j = defused(d, j.get<std::string>(), n);
    } else if (j.is_array()) {
        for (auto &x : j)
            defuse_json(d, x, n);
    } else if (j.is_object()) {
        size_t before = *n;
        common_json o = common_json::object();
        for (auto kv : j.items()) {
            common_json v = kv.value();
            defuse_json(d, v, n);
            o[defused(d, kv.key(), n)] = std::move(v);
        }
        if (*n != before) j = std::move(o);
    }
}

/* A tool call's arguments defused: as JSON (an escape such as \u003c spells the same text once read)
 * when they are JSON, written again only when a string in them changed; else as text. */
std::string defused_args(const cb_common_defuse *d, const std::string &a, size_t *n) {
    if (!d) return a;
    common_json j = common_json::parse_no_throw(a);
    if (j.is_discarded()) return defused(d, a, n);
    size_t before = *n;
    defuse_json(d, j, n);
    return *n != before ? j.dump() : a;
}

std::vector<common_chat_msg> to_msgs(const cb_common_msg *msgs, size_t n, const cb_common_defuse *d, size_t *nd) {
    std::vector<common_chat_msg> out;
    for (size_t i = 0; i < n; i++) {
        common_chat_msg m;
        m.role = msgs[i].role ? msgs[i].role : "user";
        m.content = msgs[i].content ? msgs[i].content : "";
        if (msgs[i].tool_call_id) m.tool_call_id = msgs[i].tool_call_id;
        if (msgs[i].name) m.tool_name = msgs[i].name;
        if (msgs[i].reasoning) m.reasoning_content = msgs[i].reasoning;
        if (msgs[i].tool_calls)
            for (const auto &c : common_json::parse(msgs[i].tool_calls)) {
                common_chat_tool_call tc;
                const auto &f = c.at("function");
                tc.name = defused(d, f.at("name").get<std::string>(), nd);
                const auto &a = f.at("arguments");
                tc.arguments = defused_args(d, a.is_string() ? a.get<std::string>() : a.dump(), nd);
                if (c.contains("id") && c.at("id").is_string()) tc.id = defused(d, c.at("id").get<std::string>(), nd);
                m.tool_calls.push_back(std::move(tc));
            }
        out.push_back(std::move(m));
    }
    return out;
}

/* The rule `name ::= ...` of a GBNF text: where its line starts, or npos. */
size_t rule_at(const std::string &g, const std::string &name) {
    std::string head = name + " ::= ";
    for (size_t at = 0; at < g.size();) {
        if (g.compare(at, head.size(), head) == 0) return at;
        size_t nl = g.find('\n', at);
        if (nl == std::string::npos) break;
        at = nl + 1;
    }
    return std::string::npos;
}

/* A forced call (tool_choice required or a function): the calls come first. The format's grammar
 * lets text come before them (`root ::= <generation prompt> space until-N? tool-calls`), which a
 * small model fills until it runs out of tokens; the optional text goes. A reasoning block before
 * it (`("<think>" until-M "</think>")?`) stays: its text is not optional on its own. */
void calls_first(std::string &g) {
    size_t r = rule_at(g, "root");
    if (r == std::string::npos) return;
    size_t end = g.find('\n', r);
    if (end == std::string::npos) end = g.size();
    for (size_t u = g.find(" until-", r); u != std::string::npos && u < end; u = g.find(" until-", u + 1)) {
        size_t w = u + 7;
        while (w < end && std::isalnum((unsigned char)g[w]))
            w++;
        if (w < end && g[w] == '?') {
            g.erase(u, w + 1 - u);
            return;
        }
    }
}

/* parallel_tool_calls false: one call, then the end (`tool-calls ::= (tool-call space)+` becomes a
 * single call). False when the format's grammar has no such rule. */
bool one_call(std::string &g) {
    size_t r = rule_at(g, "tool-calls");
    if (r == std::string::npos) return false;
    size_t end = g.find('\n', r);
    if (end == std::string::npos) end = g.size();
    g.replace(r, end - r, "tool-calls ::= tool-call space");
    return true;
}

} // namespace

struct cb_chat_parser {
    common_chat_parser_params params;
    bool single; /* keep the first call only (the grammar could not be held to one) */
};

namespace {

/* The inputs of common's rendering for a request: its messages, tools and reasoning. */
common_chat_templates_inputs render_inputs(const cb_chat_templates *t, const cb_common_msg *msgs, size_t n,
                                           const cb_common_tools *tools, const cb_common_reasoning *rs, bool thinking,
                                           const cb_common_defuse *d, size_t *nd) {
    common_chat_templates_inputs in;
    in.use_jinja = in.add_generation_prompt = true;
    in.messages = to_msgs(msgs, n, d, nd);
    bool with_tools = tools && tools->tools;
    if (with_tools) {
        common_json tj = common_json::parse(tools->tools);
        defuse_json(d, tj, nd);
        in.tools = common_chat_tools_parse_oaicompat(tj);
    }
    if (rs && rs->kwargs) {
        common_json kw = common_json::parse(rs->kwargs);
        defuse_json(d, kw, nd);
        for (const auto &kv : kw.items())
            in.chat_template_kwargs[kv.key()] = kv.value().dump();
    }
    if (rs && rs->effort) in.chat_template_kwargs["reasoning_effort"] = common_json(rs->effort).dump();
    if (rs && rs->think >= 0) in.enable_thinking = rs->think != 0;
    in.reasoning_format = thinking ? COMMON_REASONING_FORMAT_DEEPSEEK : COMMON_REASONING_FORMAT_NONE;
    if (thinking && rs->json_schema) in.json_schema = rs->json_schema;
    /* nothing to read out of the output: the rendering only, no parser is worked out (the fast path) */
    in.force_pure_content = !with_tools && !thinking;
    in.tool_choice = !with_tools                      ? COMMON_CHAT_TOOL_CHOICE_NONE
                     : tools->choice == CB_TOOLS_NONE ? COMMON_CHAT_TOOL_CHOICE_NONE
                     : tools->choice == CB_TOOLS_AUTO ? COMMON_CHAT_TOOL_CHOICE_AUTO
                                                      : COMMON_CHAT_TOOL_CHOICE_REQUIRED;
    in.parallel_tool_calls = with_tools && !tools->single;
    (void)t;
    return in;
}

/* The grammar of a rendering (the calls', or a schema's after the reasoning) and what starts it. */
void take_grammar(common_chat_params &p, bool calls, const cb_common_tools *tools, cb_common_rendered *out,
                  bool *single) {
    if (calls && !p.grammar_lazy) calls_first(p.grammar);
    *single = calls && tools->single && !one_call(p.grammar);
    out->grammar = cb_gbnf_widen(p.grammar.c_str(), nullptr); /* its long repetitions as rules llama.cpp keeps */
    if (!out->grammar) throw std::bad_alloc();
    out->lazy = p.grammar_lazy;
    std::vector<std::string> patterns;
    std::vector<int32_t> tokens;
    for (const auto &tr : p.grammar_triggers) {
        switch (tr.type) {
        case COMMON_GRAMMAR_TRIGGER_TYPE_WORD: patterns.push_back(regex_escape(tr.value)); break;
        case COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN: patterns.push_back(tr.value); break;
        case COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN_FULL: {
            const std::string &v = tr.value;
            patterns.push_back(v.empty() ? "^$" : (v.front() != '^' ? "^" : "") + v + (v.back() != '$' ? "$" : ""));
            break;
        }
        case COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN: tokens.push_back(tr.token); break;
        }
    }
    out->patterns = dup_all(patterns, &out->n_patterns);
    if (!tokens.empty()) {
        out->trigger_tokens = static_cast<int32_t *>(std::malloc(tokens.size() * sizeof(int32_t)));
        if (!out->trigger_tokens) throw std::bad_alloc();
        std::memcpy(out->trigger_tokens, tokens.data(), tokens.size() * sizeof(int32_t));
        out->n_trigger_tokens = tokens.size();
    }
    if (!p.grammar_lazy && !p.generation_prompt.empty()) out->prefill = dup_or_throw(p.generation_prompt);
}

std::string trimmed(const std::string &s) {
    size_t a = s.find_first_not_of(" \t\n\v\f\r"), b = s.find_last_not_of(" \t\n\v\f\r");
    return a == std::string::npos ? std::string() : s.substr(a, b + 1 - a);
}

/* A thinking rendering's markers, and whether its generation prompt leaves the block open. */
void take_thinking(const common_chat_params &p, cb_common_rendered *out) {
    out->thinks = true;
    std::string start = trimmed(p.thinking_start_tag), end = trimmed(p.thinking_end_tags.front());
    out->think_start = dup_or_throw(start);
    out->think_end = dup_or_throw(end);
    std::string g = trimmed(p.generation_prompt);
    out->think_open = g.size() >= start.size() && g.compare(g.size() - start.size(), start.size(), start) == 0;
}

} // namespace

extern "C" int cb_common_render(const cb_chat_templates *t, const cb_common_msg *msgs, size_t n,
                                const cb_common_tools *tools, const cb_common_reasoning *rs,
                                const cb_common_defuse *defuse, cb_common_rendered *out, char *err, size_t errlen) {
    *out = cb_common_rendered{};
    bool with_tools = tools && tools->tools, calls = with_tools && tools->choice != CB_TOOLS_NONE;
    bool thinking = rs && rs->extract && rs->think != 0 && t->thinking.thinks;
    void *ok = guarded(err, errlen, "the chat template failed", [&]() -> void * {
        common_chat_templates_inputs in;
        size_t changed = 0;
        try {
            in = render_inputs(t, msgs, n, tools, rs, thinking, defuse, &changed);
        } catch (const std::bad_alloc &) {
            throw;
        } catch (const std::exception &e) { /* the OpenAI layer checked the shapes: not expected */
            set_err(err, errlen, "the tools, tool calls or template arguments cannot be read", e.what());
            return nullptr;
        }
        common_chat_params p = common_chat_templates_apply(t->t.get(), in);
        out->prompt = dup_or_throw(p.prompt);
        if (!calls && !thinking) return out;
        if (changed > 0) { /* the grammar and parser hold the tools as given, not their defused text */
            size_t none = 0;
            in = render_inputs(t, msgs, n, tools, rs, thinking, nullptr, &none);
            if (!(calls && tools->function)) p = common_chat_templates_apply(t->t.get(), in);
        }
        if (calls && tools->function) { /* the prompt lists every tool; the grammar and parser know the named one */
            std::vector<common_chat_tool> all = std::move(in.tools);
            in.tools.clear();
            for (auto &x : all)
                if (x.name == tools->function) in.tools.push_back(x);
            p = common_chat_templates_apply(t->t.get(), in);
        }
        if (calls && (p.grammar.empty() || p.parser.empty())) {
            set_err(err, errlen, "the chat template has no tool-call format",
                    "give the server a template that offers tools (--chat-template)");
            return nullptr;
        }
        bool single = false;
        if (!p.grammar.empty()) take_grammar(p, calls, tools, out, &single);
        out->stops = dup_all(p.additional_stops, &out->n_stops);
        out->preserved = dup_all(p.preserved_tokens, &out->n_preserved);
        if (thinking && p.supports_thinking && !p.thinking_end_tags.empty()) take_thinking(p, out);
        std::unique_ptr<cb_chat_parser> parser(new cb_chat_parser());
        parser->params = common_chat_parser_params(p);
        parser->params.reasoning_format = in.reasoning_format;
        parser->params.parser.load(p.parser);
        parser->single = single;
        out->parser = parser.release();
        return out;
    });
    if (!ok) cb_common_rendered_clear(out);
    return ok ? 0 : -1;
}

static void free_all(char **a, size_t n) {
    for (size_t i = 0; a && i < n; i++)
        std::free(a[i]);
    std::free(a);
}

extern "C" void cb_common_rendered_clear(cb_common_rendered *r) {
    std::free(r->prompt);
    std::free(r->grammar);
    free_all(r->patterns, r->n_patterns);
    std::free(r->trigger_tokens);
    std::free(r->prefill);
    free_all(r->stops, r->n_stops);
    free_all(r->preserved, r->n_preserved);
    delete r->parser;
    std::free(r->think_start);
    std::free(r->think_end);
    *r = cb_common_rendered{};
}

extern "C" struct llama_sampler *cb_common_grammar_sampler(const struct llama_vocab *vocab, const cb_common_rendered *r,
                                                           const cb_grammar_limits *lim, char *err, size_t errlen) {
    return guarded(err, errlen, "the tool-call grammar failed", [&]() -> llama_sampler * {
        char why[240] = "";
        llama_sampler *g =
            cb_common_grammar_new(vocab, r->grammar, r->lazy, r->patterns, r->lazy ? r->n_patterns : 0,
                                  r->trigger_tokens, r->lazy ? r->n_trigger_tokens : 0, lim, why, sizeof(why));
        if (!g) {
            set_err(err, errlen, "the tool-call grammar cannot be used", why);
            return nullptr;
        }
        std::unique_ptr<llama_sampler, void (*)(llama_sampler *)> own(g, llama_sampler_free);
        if (r->prefill) { /* the grammar begins with the generation prompt, which the prompt already holds */
            std::vector<llama_token> toks = common_tokenize(vocab, r->prefill, false, true);
            for (size_t i = 0; i < toks.size(); i++) {
                std::string piece = common_token_to_piece(vocab, toks[i], true);
                /* some tokenizers put a space before the first special token: not the prompt's */
                if (i == 0 && !piece.empty() && std::isspace((unsigned char)piece[0]) &&
                    !std::isspace((unsigned char)r->prefill[0]))
                    continue;
                llama_sampler_accept(g, toks[i]);
            }
            const char *blown = nullptr;
            if (cb_common_grammar_blown(g, &blown)) {
                set_err(err, errlen, "the tool-call grammar cannot take the generation prompt", blown);
                return nullptr;
            }
        }
        return own.release();
    });
}

extern "C" void cb_chat_parser_free(cb_chat_parser *p) { delete p; }

extern "C" void cb_common_calls_free(cb_common_call *calls, size_t n) {
    for (size_t i = 0; calls && i < n; i++) {
        std::free(calls[i].name);
        std::free(calls[i].arguments);
    }
    std::free(calls);
}

extern "C" int cb_common_parse(const cb_chat_parser *p, const char *text, size_t len, bool partial, char **reasoning,
                               char **content, cb_common_call **calls, size_t *n_calls, char *err, size_t errlen) {
    *reasoning = nullptr;
    *content = nullptr;
    *calls = nullptr;
    *n_calls = 0;
    void *ok = guarded(err, errlen, "the output cannot be read", [&]() -> void * {
        common_chat_msg m = common_chat_parse(std::string(text, len), partial, p->params);
        size_t k = p->single && m.tool_calls.size() > 1 ? 1 : m.tool_calls.size();
        *reasoning = dup_or_throw(m.reasoning_content);
        *content = dup_or_throw(m.content);
        if (k) {
            *calls = static_cast<cb_common_call *>(std::calloc(k, sizeof(cb_common_call)));
            if (!*calls) throw std::bad_alloc();
            for (size_t i = 0; i < k; i++) {
                (*calls)[i].name = dup_or_throw(m.tool_calls[i].name);
                (*n_calls)++;
                (*calls)[i].arguments = dup_or_throw(m.tool_calls[i].arguments);
            }
        }
        return *content;
    });
    if (ok) return 0;
    std::free(*reasoning);
    std::free(*content);
    cb_common_calls_free(*calls, *n_calls);
    *reasoning = nullptr;
    *content = nullptr;
    *calls = nullptr;
    *n_calls = 0;
    return -1;
}

/* ---------------------------------------------------------------- reasoning blocks --------- */

namespace {

/* A reasoning block followed by its markers' text (not their tokens: a model without marker tokens
 * may spell a marker in many ways): outside, watching for the start marker; inside, counting
 * tokens and watching for the end; forcing the end marker's tokens once the budget is spent. */
struct think_block {
    const llama_vocab *vocab;
    std::string start, end;
    std::vector<llama_token> forced; /* the end marker's tokens */
    int32_t budget, used;            /* used: tokens written in this block */
    enum { OUT, IN, FORCING } state;
    size_t force_pos;
    std::string tail; /* the text since the last marker, cut to what may still begin one */
};

/* Whether text ends inside a UTF-8 character (a budget spent then waits for its last bytes). */
bool cut_utf8(const std::string &t) {
    size_t i = t.size(), k = 0;
    while (i > 0 && k < 4 && ((unsigned char)t[i - 1] & 0xC0) == 0x80)
        i--, k++;
    if (i == 0) return false;
    unsigned char c = (unsigned char)t[i - 1];
    size_t need = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    return k < need;
}

/* Finds marker m in b->tail: true with the tail cut to what follows it; false with the tail cut to
 * what may still begin it. */
bool find_marker(think_block *b, const std::string &m) {
    size_t at = b->tail.find(m);
    if (at != std::string::npos) {
        b->tail.erase(0, at + m.size());
        return true;
    }
    if (b->tail.size() >= m.size()) b->tail.erase(0, b->tail.size() - (m.size() - 1));
    return false;
}

const char *think_name(const llama_sampler *) { return "cobatch-think"; }

void think_accept(llama_sampler *s, llama_token tok) {
    think_block *b = static_cast<think_block *>(s->ctx);
    if (b->state == think_block::FORCING) {
        if (++b->force_pos >= b->forced.size()) b->state = think_block::OUT, b->tail.clear();
        return;
    }
    b->tail += common_token_to_piece(b->vocab, tok, true);
    if (b->state == think_block::OUT) {
        if (!find_marker(b, b->start)) return;
        b->state = think_block::IN;
        b->used = 0;
    } else {
        b->used++;
        if (find_marker(b, b->end)) {
            b->state = think_block::OUT;
            return;
        }
    }
    if (b->budget >= 0 && b->used >= b->budget && !cut_utf8(b->tail)) {
        b->state = think_block::FORCING;
        b->force_pos = 0;
    }
}

void think_apply(llama_sampler *s, llama_token_data_array *cur) {
    think_block *b = static_cast<think_block *>(s->ctx);
    if (b->state != think_block::FORCING || b->force_pos >= b->forced.size()) return;
    for (size_t i = 0; i < cur->size; i++)
        if (cur->data[i].id != b->forced[b->force_pos]) cur->data[i].logit = -INFINITY;
}

void think_free(llama_sampler *s) { delete static_cast<think_block *>(s->ctx); }

llama_sampler_i think_iface = {think_name, think_accept, think_apply, nullptr, nullptr, think_free,
                               nullptr,    nullptr,      nullptr,     nullptr, nullptr, nullptr};

} // namespace

extern "C" struct llama_sampler *cb_common_think_new(const struct llama_vocab *vocab, const char *start,
                                                     const char *end, int32_t budget, bool open, char *err,
                                                     size_t errlen) {
    return guarded(err, errlen, "the reasoning block cannot be followed", [&]() -> llama_sampler * {
        std::unique_ptr<think_block> b(new think_block());
        b->vocab = vocab;
        b->start = start;
        b->end = end;
        b->forced = common_tokenize(vocab, end, false, true);
        if (b->start.empty() || b->end.empty() || b->forced.empty()) {
            set_err(err, errlen, "the reasoning block cannot be followed", "its markers are empty");
            return nullptr;
        }
        b->budget = budget < 0 ? -1 : budget;
        b->used = 0;
        b->state = open ? think_block::IN : think_block::OUT;
        if (open && budget == 0) b->state = think_block::FORCING;
        b->force_pos = 0;
        llama_sampler *s = llama_sampler_init(&think_iface, b.get());
        if (!s) throw std::bad_alloc();
        b.release();
        return s;
    });
}

extern "C" bool cb_common_think_inside(const struct llama_sampler *s) {
    const think_block *b = static_cast<const think_block *>(s->ctx);
    return b->state != think_block::OUT;
}

/* ---------------------------------------------------------------- bounded grammars --------- */

namespace {

/* The parse states (stacks) expanding a rule at the start of a match can make, an upper bound, as
 * llama_grammar_advance_stack makes them: each alternative gives the states of its first element
 * (one for a terminal; a rule's own for a reference, and the next element's too when that rule can
 * match nothing). Saturates at `cap`; references chained deeper than `depth_cap` set too_deep. */
struct grammar_shape {
    const llama_grammar_rules &rules;
    size_t cap, depth_cap;
    std::vector<char> nullable;
    std::vector<size_t> states; /* 0: not yet known */
    std::vector<size_t> busy;   /* 1 + where on `grows` a rule being expanded began; 0: not */
    std::vector<char> grows;    /* along the expansion: whether each reference had more after it */
    bool too_deep = false;
    uint32_t left = UINT32_MAX; /* a rule that can begin with itself, when one is found */

    grammar_shape(const llama_grammar_rules &r, size_t c, size_t d)
        : rules(r), cap(c), depth_cap(d), nullable(r.size(), 0), states(r.size(), 0), busy(r.size(), 0) {
        for (bool changed = true; changed;) { /* the rules that can match nothing, to a fixed point */
            changed = false;
            for (size_t i = 0; i < rules.size(); i++)
                if (!nullable[i] && can_be_empty(rules[i])) nullable[i] = changed = true;
        }
    }

    bool can_be_empty(const llama_grammar_rule &rule) const {
        bool empty_so_far = true;
        for (const llama_grammar_element &e : rule) {
            if (e.type == LLAMA_GRETYPE_END || e.type == LLAMA_GRETYPE_ALT) {
                if (empty_so_far) return true;
                if (e.type == LLAMA_GRETYPE_END) return false;
                empty_so_far = true;
            } else if (empty_so_far &&
                       (e.type != LLAMA_GRETYPE_RULE_REF || e.value >= rules.size() || !nullable[e.value])) {
                empty_so_far = false;
            }
        }
        return false;
    }

    size_t add(size_t a, size_t b) const { return a + b > cap ? cap : a + b; }

    size_t of(uint32_t r, size_t depth) {
        if (r >= rules.size()) return 1;
        if (depth > depth_cap) {
            too_deep = true;
            return cap;
        }
        if (states[r]) return states[r];
        if (busy[r]) { /* left recursion, maybe through rules that match nothing: when a reference on the
                          cycle has more after it, llama.cpp's start expands without end (root ::= e,
                          e ::= t e "x", t ::= [a-z]*: gigabytes); a cycle of last references ends */
            for (size_t i = busy[r] - 1; i < grows.size(); i++)
                if (grows[i]) left = r;
            return 1;
        }
        busy[r] = grows.size() + 1;
        size_t n = 0;
        const llama_grammar_rule &rule = rules[r];
        size_t i = 0;
        while (i < rule.size() && n < cap && !too_deep) { /* one alternative per turn */
            size_t k = i;
            for (;; k++) {
                const llama_grammar_element &e = rule[k];
                if (e.type != LLAMA_GRETYPE_RULE_REF) { /* a terminal, or the end: all before it was empty */
                    n = add(n, 1);
                    break;
                }
                bool last = k + 1 >= rule.size() || rule[k + 1].type == LLAMA_GRETYPE_END ||
                            rule[k + 1].type == LLAMA_GRETYPE_ALT;
                grows.push_back(!last);
                n = add(n, of(e.value, depth + 1));
                grows.pop_back();
                if (e.value >= rules.size() || !nullable[e.value]) break;
            }
            while (k < rule.size() && rule[k].type != LLAMA_GRETYPE_END && rule[k].type != LLAMA_GRETYPE_ALT)
                k++;
            if (k >= rule.size() || rule[k].type == LLAMA_GRETYPE_END) break;
            i = k + 1;
        }
        busy[r] = 0;
        states[r] = n ? n : 1;
        return states[r];
    }
};

/* The checks before llama.cpp parses a grammar or builds its start: its parser recurses once per
 * nested group, its repetitions copy elements, and its start expands every alternative reachable
 * at the first position (2^22 states from 560 bytes). Returns false with the reason in err. */
bool grammar_fits(const llama_vocab *vocab, const char *gbnf, const cb_grammar_limits &lim, char *err, size_t errlen) {
    cb_gbnf_shape sh = cb_gbnf_scan(gbnf);
    if (sh.depth > (size_t)lim.max_nesting) {
        std::snprintf(err, errlen, "the grammar nests %zu groups deep, above the limit of %d (--limit grammar-nesting)",
                      sh.depth, lim.max_nesting);
        return false;
    }
    if (sh.inverted) { /* llama.cpp's parser would make rules for n - m wrapped around: forever */
        set_err(
            err, errlen,
            "the grammar has a repetition {m,n} with n below m (a schema's minLength or minItems above its maximum?)",
            nullptr);
        return false;
    }
    /* left after widening (cb_gbnf_widen): past its largest count, or after no symbol */
    if (sh.repeat_min > CB_GBNF_MAX_REPEAT) { /* llama.cpp's parser fails on it */
        std::snprintf(err, errlen,
                      "the grammar repeats something at least %llu times, above 2000, more than cobatch rewrites for "
                      "llama.cpp's grammars (counts up to %llu, %d such repetitions a grammar)",
                      sh.repeat_min, CB_GBNF_MAX_WIDE, CB_GBNF_MAX_WIDENED);
        return false;
    }
    if (sh.repeat_max > CB_GBNF_MAX_REPEAT) { /* llama.cpp's parser would silently drop it */
        std::snprintf(err, errlen,
                      "the grammar has a repetition bound of %llu (a schema's maxLength or maxItems, or a pattern's "
                      "{m,n}?), above 2000, more than cobatch rewrites for llama.cpp's grammars (counts up to %llu, "
                      "%d such repetitions a grammar; it would silently not hold)",
                      sh.repeat_max, CB_GBNF_MAX_WIDE, CB_GBNF_MAX_WIDENED);
        return false;
    }
    if (sh.elements > (unsigned long long)lim.max_elements) {
        std::snprintf(err, errlen,
                      "the grammar expands to about %llu elements (its repetitions copied), above the limit of %d "
                      "(--limit grammar-elements)",
                      sh.elements, lim.max_elements);
        return false;
    }
    llama_grammar_parser parser(vocab);
    if (!parser.parse(gbnf) || parser.rules.empty()) {
        set_err(err, errlen, "the grammar does not parse as GBNF", nullptr);
        return false;
    }
    if (parser.symbol_ids.find("root") == parser.symbol_ids.end()) {
        set_err(err, errlen, "the grammar has no root rule", nullptr);
        return false;
    }
    grammar_shape shape(parser.rules, (size_t)lim.max_states + 1, (size_t)lim.max_nesting);
    for (uint32_t r = 0; r < parser.rules.size(); r++) {
        size_t n = shape.of(r, 0);
        if (shape.too_deep) {
            std::snprintf(err, errlen,
                          "the grammar's rules nest more than %d deep at one position (--limit grammar-nesting)",
                          lim.max_nesting);
            return false;
        }
        if (shape.left != UINT32_MAX) {
            std::string name = "?";
            for (const auto &kv : parser.symbol_ids)
                if (kv.second == shape.left) name = kv.first;
            std::snprintf(err, errlen,
                          "the grammar's rule '%.60s' can begin with itself (left recursion, perhaps after rules that "
                          "match nothing), which llama.cpp's grammars cannot run",
                          name.c_str());
            return false;
        }
        if (n > (size_t)lim.max_states) {
            std::string name = "?";
            for (const auto &kv : parser.symbol_ids)
                if (kv.second == r) name = kv.first;
            std::snprintf(err, errlen,
                          "the grammar's rule '%.60s' can begin in more than %d ways, the limit of parse states "
                          "(--limit grammar-states)",
                          name.c_str(), lim.max_states);
            return false;
        }
    }
    return true;
}

std::vector<uint32_t> read_utf8(const std::string &text, llama_partial_utf8 &p);

/* Every token's text as the grammar reads it from a clean state (what a check of the candidates
 * reads unless the last token cut a character): made once per grammar and shared by its clones. */
struct piece_table {
    enum : uint8_t { TEXT, END, NONE }; /* NONE: no text, or one that begins with a NUL (never allowed) */
    std::vector<uint8_t> kind;
    std::vector<uint32_t> chars;
    std::vector<size_t> start; /* token i's characters: chars[start[i], start[i + 1]) */
    std::vector<llama_partial_utf8> end;

    /* a token's text as llama.cpp's grammar reads it (special tokens spelled out) */
    static std::string text(const llama_vocab *vocab, llama_token id) {
        char buf[256];
        int32_t n = llama_token_to_piece(vocab, id, buf, sizeof(buf), 0, true);
        if (n >= 0) return std::string(buf, (size_t)n);
        std::string t((size_t)-n, 0);
        n = llama_token_to_piece(vocab, id, &t[0], (int32_t)t.size(), 0, true);
        t.resize(n > 0 ? (size_t)n : 0);
        return t;
    }

    explicit piece_table(const llama_vocab *vocab) {
        int32_t n = llama_vocab_n_tokens(vocab);
        kind.resize((size_t)n);
        end.resize((size_t)n, {0, 0});
        start.resize((size_t)n + 1, 0);
        for (int32_t id = 0; id < n; id++) {
            start[id] = chars.size();
            if (llama_vocab_is_eog(vocab, id)) {
                kind[id] = END;
                continue;
            }
            std::string t = text(vocab, id);
            if (t.empty() || t[0] == 0) {
                kind[id] = NONE;
                continue;
            }
            kind[id] = TEXT;
            llama_partial_utf8 p = {0, 0};
            std::vector<uint32_t> c = read_utf8(t, p);
            chars.insert(chars.end(), c.begin(), c.end());
            end[id] = p;
        }
        start[n] = chars.size();
    }
};

struct bounded_grammar {
    const llama_vocab *vocab;
    llama_grammar *g;
    cb_grammar_limits lim;
    bool blown;
    char why[256];
    /* about what llama.cpp's own code would cost on the last apply (its recursion walks every way
     * to a stack, each way compares the stacks it unfolds pairwise) and on the last accept (each
     * state held takes the token's characters on its own, comparing the states pairwise); for the
     * twin check */
    double last_cost, last_accept_cost;
    bool twin;                                 /* an apply for the twin check: count llama.cpp's cost in full */
    std::shared_ptr<const piece_table> pieces; /* made at the first check of candidates */
};

void note_states(bounded_grammar *b) {
    size_t n = b->g->stacks.size();
    if (n > (size_t)b->lim.max_states && !b->blown) {
        b->blown = true;
        std::snprintf(b->why, sizeof(b->why),
                      "the grammar holds %zu parse states after this token, above the limit of %d (an ambiguous "
                      "grammar; --limit grammar-states)",
                      n, b->lim.max_states);
    }
}

/* A parse stack's hash, for the set of the stacks one token has reached. */
struct stack_hash {
    size_t operator()(const llama_grammar_stack &st) const {
        size_t h = 1469598103934665603ull;
        for (const llama_grammar_element *e : st)
            h = (h ^ (size_t)(uintptr_t)e) * 1099511628211ull;
        return h;
    }
};

/* What one token may do to the parse states: every stack it builds is counted (its elements), up to
 * a budget, and each is built once. llama.cpp's own accept has no such count: a stack whose
 * continuations below it may all be empty unfolds into every level's alternatives (a grammar
 * `root ::= "x" root n | "y"` with n empty or one of 1,000 strings makes 100,000 states from one
 * character after 100 x's) and compares each new state with all the others. */
using stack_set = std::unordered_set<llama_grammar_stack, stack_hash>;

struct token_work {
    size_t elements = 0, budget, visits = 0;
    stack_set seen;
    bool over = false;
};

bool is_end(const llama_grammar_element *pos) {
    return pos->type == LLAMA_GRETYPE_END || pos->type == LLAMA_GRETYPE_ALT;
}

/* The stacks that st leads to whose top waits at a character or a token (or that are empty: the
 * grammar may end), each added to out once while it is in seen. False past the budget. */
bool unfold(const llama_grammar_rules &rules, llama_grammar_stack st, token_work &w, stack_set &seen,
            llama_grammar_stacks &out) {
    std::vector<llama_grammar_stack> todo;
    todo.push_back(std::move(st));
    while (!todo.empty()) {
        llama_grammar_stack cur = std::move(todo.back());
        todo.pop_back();
        w.elements += cur.size() + 1;
        if (w.elements > w.budget) return !(w.over = true);
        auto ins = seen.insert(std::move(cur));
        if (!ins.second) continue;
        const llama_grammar_stack &c = *ins.first;
        if (c.empty() || c.back()->type != LLAMA_GRETYPE_RULE_REF) {
            out.push_back(c);
            continue;
        }
        const llama_grammar_element *pos = c.back();
        const llama_grammar_element *alt = rules[pos->value].data();
        for (;;) { /* each alternative of the rule: the rest of this sequence below it, the alternative on top */
            llama_grammar_stack next(c.begin(), c.end() - 1);
            if (!is_end(pos + 1)) next.push_back(pos + 1);
            if (!is_end(alt)) next.push_back(alt);
            todo.push_back(std::move(next));
            while (!is_end(alt))
                alt++;
            if (alt->type != LLAMA_GRETYPE_ALT) break;
            alt++;
        }
    }
    return true;
}

/* Whether chr is in the character class at pos (a character, a range, any; negated or not; its
 * alternatives after it); *after is the element past the class. */
bool class_has(const llama_grammar_element *pos, uint32_t chr, const llama_grammar_element **after) {
    bool in = false, negated = pos->type == LLAMA_GRETYPE_CHAR_NOT;
    do {
        if (pos[1].type == LLAMA_GRETYPE_CHAR_RNG_UPPER) {
            in = in || (pos->value <= chr && chr <= pos[1].value);
            pos += 2;
        } else {
            in = in || pos->type == LLAMA_GRETYPE_CHAR_ANY || pos->value == chr;
            pos += 1;
        }
    } while (pos->type == LLAMA_GRETYPE_CHAR_ALT);
    *after = pos;
    return in != negated;
}

/* The stacks that take chr from held (those waiting at a token do not). */
bool take_char(const llama_grammar_rules &rules, const llama_grammar_stacks &held, uint32_t chr, token_work &w,
               llama_grammar_stacks &out) {
    w.seen.clear(); /* a state reached by an earlier character is a different state of the output */
    for (const auto &st : held) {
        if (st.empty()) continue;
        const llama_grammar_element *pos = st.back(), *after;
        if (pos->type == LLAMA_GRETYPE_TOKEN || pos->type == LLAMA_GRETYPE_TOKEN_NOT) continue;
        if (!class_has(pos, chr, &after)) continue;
        llama_grammar_stack next(st.begin(), st.end() - 1);
        if (!is_end(after)) next.push_back(after);
        if (!unfold(rules, std::move(next), w, w.seen, out)) return false;
    }
    return true;
}

/* A token's text as llama.cpp's grammar reads it, continuing the decoding state p: its complete
 * characters, and the state after it (n_remain > 0: a character is cut; -1: the text is not UTF-8,
 * and then no character is read). Up to a NUL. Only bytes that continue a character cut by an earlier
 * token are checked to be continuation bytes, as llama.cpp does. */
std::vector<uint32_t> read_utf8(const std::string &text, llama_partial_utf8 &p) {
    static const int lead[16] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4};
    std::vector<uint32_t> chars;
    size_t i = 0, n = std::strlen(text.c_str());
    uint32_t value = p.value;
    int rest = p.n_remain;
    for (; i < n && rest > 0; i++, rest--) {
        uint8_t byte = (uint8_t)text[i];
        if ((byte >> 6) != 2) {
            p = {0, -1};
            return {};
        }
        value = (value << 6) + (byte & 0x3F);
    }
    if (p.n_remain > 0 && rest == 0) chars.push_back(value);
    while (i < n) {
        uint8_t byte = (uint8_t)text[i++];
        rest = lead[byte >> 4] - 1;
        if (rest < 0) {
            p = {0, -1};
            return {};
        }
        value = byte & ((1u << (7 - rest)) - 1);
        for (; i < n && rest > 0; i++, rest--)
            value = (value << 6) + ((uint8_t)text[i] & 0x3F);
        if (rest == 0) chars.push_back(value);
    }
    p = {value, rest};
    return chars;
}

/* A token taken as llama.cpp's llama_grammar_accept_token takes it (a stack waiting at a token
 * takes the token; the others its text, a character at a time), within w's budget. The states are
 * counted after each character. */
void take_token(bounded_grammar *b, llama_token tok, const std::string &text) {
    llama_grammar &g = *b->g;
    const llama_grammar_rules &rules = g.rules;
    token_work w;
    w.budget = (size_t)b->lim.max_states * CB_GRAMMAR_WORK_PER_STATE;
    llama_grammar_stacks by_token, by_text;
    for (const auto &st : g.stacks) {
        if (st.empty()) continue;
        const llama_grammar_element *pos = st.back();
        bool token_el = pos->type == LLAMA_GRETYPE_TOKEN || pos->type == LLAMA_GRETYPE_TOKEN_NOT;
        if (!token_el) {
            by_text.push_back(st);
        } else if ((pos->type == LLAMA_GRETYPE_TOKEN) == (pos->value == (uint32_t)tok)) {
            llama_grammar_stack next(st.begin(), st.end() - 1);
            if (!is_end(pos + 1)) next.push_back(pos + 1);
            if (!unfold(rules, std::move(next), w, w.seen, by_token)) break;
        }
    }
    for (uint32_t chr : read_utf8(text, g.partial_utf8)) {
        llama_grammar_stacks next;
        if (!take_char(rules, by_text, chr, w, next)) break;
        b->last_accept_cost +=
            (double)g.stacks.size() * ((double)next.size() * (double)next.size() + (double)w.elements);
        if (next.size() > (size_t)b->lim.max_states) {
            g.stacks = std::move(next);
            note_states(b);
            return;
        }
        by_text = std::move(next);
    }
    if (w.over) {
        b->blown = true;
        std::snprintf(b->why, sizeof(b->why),
                      "the grammar's parse states for this token ran past %zu parse-stack elements (an ambiguous "
                      "grammar; --limit grammar-states)",
                      w.budget);
        return;
    }
    stack_set once(by_token.begin(), by_token.end());
    for (auto &st : by_text)
        if (once.insert(st).second) by_token.push_back(std::move(st));
    if (by_token.empty()) {
        b->blown = true;
        std::snprintf(b->why, sizeof(b->why), "the grammar cannot take the token");
        return;
    }
    g.stacks = std::move(by_token);
    note_states(b);
}

const char *bg_name(const llama_sampler *) { return "cobatch-grammar"; }

/* Our accept (take_token), bounded in states and in work; llama.cpp's own while a lazy grammar waits
 * for its trigger (it buffers, and replays the trigger's text when it comes) and for an end of
 * generation (allowed only where a state is complete). */
void bg_accept(llama_sampler *s, llama_token tok) {
    auto *b = static_cast<bounded_grammar *>(s->ctx);
    if (b->blown) return;
    b->last_accept_cost = 0;
    try {
        llama_grammar &g = *b->g;
        if (g.awaiting_trigger || llama_vocab_is_eog(b->vocab, tok)) {
            llama_grammar_accept_impl(g, tok);
            note_states(b);
            return;
        }
        take_token(b, tok, piece_table::text(b->vocab, tok));
    } catch (const std::exception &e) { /* llama.cpp throws when no state takes the token */
        b->blown = true;
        std::snprintf(b->why, sizeof(b->why), "the grammar cannot take the token: %.150s", e.what());
    }
}

/* Whether a character cut at the end of a token (p, n_remain > 0) could complete to one the class at
 * pos takes, as llama.cpp decides it. */
bool class_may_have(const llama_grammar_element *pos, llama_partial_utf8 p) {
    bool negated = pos->type == LLAMA_GRETYPE_CHAR_NOT;
    if (p.n_remain < 0 || (p.n_remain == 1 && p.value < 2)) return false; /* not UTF-8, or an overlong ASCII */
    uint32_t low = p.value << (p.n_remain * 6), high = low | ((1u << (p.n_remain * 6)) - 1);
    if (low == 0 && p.n_remain == 2) low = 1u << 11;
    if (low == 0 && p.n_remain == 3) low = 1u << 16;
    do {
        if (pos[1].type == LLAMA_GRETYPE_CHAR_RNG_UPPER) {
            if (pos->value <= high && low <= pos[1].value) return !negated;
            pos += 2;
        } else if (pos->type == LLAMA_GRETYPE_CHAR_ANY) {
            return true;
        } else {
            if (low <= pos->value && pos->value <= high) return !negated;
            pos += 1;
        }
    } while (pos->type == LLAMA_GRETYPE_CHAR_ALT);
    return negated;
}

/* A candidate token of bg_apply that may be text the grammar takes: its place in the candidates and
 * its characters (the table's, or read again after a character the last token cut). */
struct candidate {
    size_t index;
    llama_token id;
    const uint32_t *chars;
    size_t n_chars;
    llama_partial_utf8 partial;
};

/* The stacks reached after k characters, each with the tokens (indexes into the candidates) that
 * reached it. */
using stack_level = std::vector<std::pair<llama_grammar_stack, std::vector<uint32_t>>>;

/* bg_apply's walk over the candidates' characters: the candidates, which of them the grammar allows,
 * and the work so far. */
struct apply_walk {
    bounded_grammar *b;
    std::vector<candidate> toks;
    std::vector<char> allowed;
    std::vector<uint32_t> mark; /* per candidate: the last stack that looked at it */
    uint32_t uid = 0;
    token_work w;
    size_t max_visits = 0;
};

/* Reads cur's candidates into toks (their characters into reread when not the table's; live indexes
 * them): a token that is no text, or an end the grammar may not take here, is masked at once. */
void read_candidates(bounded_grammar *b, llama_token_data_array *cur, bool may_end, std::vector<candidate> &toks,
                     std::vector<uint32_t> &live, std::vector<std::vector<uint32_t>> &reread) {
    const llama_grammar &g = *b->g;
    /* the table pays from about a thousand candidates; the engine checks its sampled token alone first */
    if (!b->pieces && cur->size >= 1024) b->pieces = std::make_shared<piece_table>(b->vocab);
    const piece_table *pt = b->pieces.get();
    /* the candidates' characters: the table's, or read again after a character the last token cut */
    bool reread_all = !pt || g.partial_utf8.n_remain > 0;
    if (reread_all) reread.reserve(cur->size);
    toks.reserve(cur->size);
    live.reserve(cur->size);
    for (size_t i = 0; i < cur->size && !b->blown; i++) {
        llama_token id = cur->data[i].id;
        uint8_t kind = piece_table::NONE;
        std::string text;
        if (pt && id >= 0 && (size_t)id < pt->kind.size()) {
            kind = pt->kind[id];
        } else if (!pt && id >= 0 && id < llama_vocab_n_tokens(b->vocab)) {
            text = piece_table::text(b->vocab, id);
            kind = llama_vocab_is_eog(b->vocab, id) ? piece_table::END
                   : text.empty() || text[0] == 0   ? piece_table::NONE
                                                    : piece_table::TEXT;
        }
        if (kind == piece_table::NONE) {
            cur->data[i].logit = -INFINITY;
            continue;
        }
        if (kind == piece_table::END) {
            if (!may_end) cur->data[i].logit = -INFINITY;
            continue;
        }
        live.push_back((uint32_t)toks.size());
        if (!reread_all) {
            toks.push_back({i, id, pt->chars.data() + pt->start[id], pt->start[id + 1] - pt->start[id], pt->end[id]});
            continue;
        }
        llama_partial_utf8 p = g.partial_utf8;
        reread.push_back(read_utf8(pt ? piece_table::text(b->vocab, id) : text, p));
        toks.push_back({i, id, reread.back().data(), reread.back().size(), p});
    }
}

/* Decides the tokens that reached a stack whose top is pos, at their k-th character: one that ends
 * there is allowed or not; one whose character the class at pos takes goes on (into going). */
void decide_tokens(apply_walk &a, size_t k, const llama_grammar_element *pos, const std::vector<uint32_t> &tokens,
                   std::vector<uint32_t> &going) {
    const llama_grammar_element *after = nullptr;
    a.uid++;
    for (uint32_t t : tokens) {
        if (a.allowed[t] || a.mark[t] == a.uid) continue; /* a token that came by several ways: once */
        a.mark[t] = a.uid;
        const candidate &tk = a.toks[t];
        bool at_end = k >= tk.n_chars;
        if (!pos) {
            a.allowed[t] = at_end && tk.partial.n_remain == 0;
        } else if (pos->type == LLAMA_GRETYPE_TOKEN || pos->type == LLAMA_GRETYPE_TOKEN_NOT) {
            a.allowed[t] = at_end ? tk.partial.n_remain == 0
                                  : (pos->type == LLAMA_GRETYPE_TOKEN) == (pos->value == (uint32_t)tk.id);
        } else if (at_end) {
            a.allowed[t] = tk.partial.n_remain == 0 || class_may_have(pos, tk.partial);
        } else if (class_has(pos, tk.chars[k], &after)) {
            going.push_back(t);
        }
    }
}

/* Moves the walk one character on, from level (each stack reached ways[i] ways) to next: the stacks
 * each stack's going tokens reach, with their tokens and ways. Adds llama.cpp's cost to
 * b->last_cost; sets a.w.over past the budgets. */
void walk_level(apply_walk &a, size_t k, const stack_level &level, const std::vector<double> &ways, stack_level &next,
                std::vector<double> &next_ways) {
    bounded_grammar *b = a.b;
    token_work &w = a.w;
    std::unordered_map<llama_grammar_stack, size_t, stack_hash> at; /* a stack of the next level: its place */
    std::unordered_map<llama_grammar_stack, std::vector<size_t>, stack_hash> unfolded; /* memo */
    for (size_t i = 0; i < level.size(); i++) {
        auto &item = level[i];
        const llama_grammar_stack &st = item.first;
        const llama_grammar_element *pos = st.empty() ? nullptr : st.back(), *after = nullptr;
        std::vector<uint32_t> going;
        w.visits += item.second.size();
        decide_tokens(a, k, pos, item.second, going);
        if (going.empty() &&
            !(b->twin && pos && pos->type != LLAMA_GRETYPE_TOKEN && pos->type != LLAMA_GRETYPE_TOKEN_NOT))
            continue;
        class_has(pos, 0, &after);
        llama_grammar_stack popped(st.begin(), st.end() - 1);
        if (!is_end(after)) popped.push_back(after);
        if (going.empty()) { /* llama.cpp unfolds a stack that no token goes through too */
            token_work tw;
            tw.budget = 1000000;
            stack_set seen;
            llama_grammar_stacks reached;
            double n = unfold(b->g->rules, popped, tw, seen, reached) ? (double)reached.size() : 1e9;
            b->last_cost += ways[i] * n * n;
            continue;
        }
        auto memo = unfolded.find(popped);
        if (memo == unfolded.end()) {
            llama_grammar_stacks reached;
            stack_set seen;
            w.elements += popped.size();
            if (!unfold(b->g->rules, popped, w, seen, reached)) return;
            std::vector<size_t> places;
            for (auto &r : reached) {
                auto ins = at.insert({r, next.size()});
                if (ins.second) {
                    next.push_back({std::move(r), {}});
                    next_ways.push_back(0);
                }
                places.push_back(ins.first->second);
            }
            memo = unfolded.emplace(std::move(popped), std::move(places)).first;
        }
        double n_reached = (double)memo->second.size();
        b->last_cost += ways[i] * (n_reached * n_reached + (double)going.size());
        for (size_t place : memo->second) {
            next_ways[place] += ways[i];
            auto &into = next[place].second;
            w.visits += going.size();
            into.insert(into.end(), going.begin(), going.end());
        }
        if (w.visits > a.max_visits) w.over = true;
        if (w.over) return;
    }
}

/* The tokens the grammar allows among cur, as llama.cpp's llama_grammar_apply_impl decides, found
 * character by character for all the tokens at once: after k characters, each stack reached is kept
 * once with the tokens that reached it. llama.cpp recurses per stack instead, and a grammar whose
 * stacks branch at every character makes that exponential (a 60-byte grammar of nested repetitions
 * ran past fuzz_grammar's 15 s on one 10-character token). The work (elements built, tokens looked
 * at) is counted; past lim.max_states * CB_GRAMMAR_WORK_PER_STATE elements built or
 * lim.max_states * CB_GRAMMAR_APPLY_WORK_PER_STATE candidates looked at, the grammar is blown and
 * allows nothing. */
void bg_apply(llama_sampler *s, llama_token_data_array *cur) {
    auto *b = static_cast<bounded_grammar *>(s->ctx);
    const llama_grammar &g = *b->g;
    if (!b->blown && g.awaiting_trigger) return;
    bool may_end = false;
    for (const auto &st : g.stacks)
        may_end = may_end || st.empty();
    apply_walk a;
    a.b = b;
    std::vector<uint32_t> live; /* indexes into a.toks */
    std::vector<std::vector<uint32_t>> reread;
    read_candidates(b, cur, may_end, a.toks, live, reread);
    a.allowed.assign(a.toks.size(), 0);
    a.mark.assign(a.toks.size(), 0);
    a.w.budget = (size_t)b->lim.max_states * CB_GRAMMAR_WORK_PER_STATE;
    a.max_visits = (size_t)b->lim.max_states * CB_GRAMMAR_APPLY_WORK_PER_STATE;
    /* the stacks reached after k characters, each with the tokens that reached it */
    stack_level level;
    std::vector<double> ways; /* per stack of the level: the ways llama.cpp's recursion reaches it */
    for (const auto &st : g.stacks) {
        level.push_back({st, live});
        ways.push_back(1);
    }
    b->last_cost = (double)g.stacks.size() * (double)live.size();
    for (size_t k = 0; !level.empty() && !b->blown; k++) {
        stack_level next;
        std::vector<double> next_ways;
        walk_level(a, k, level, ways, next, next_ways);
        if (a.w.over) {
            b->blown = true;
            std::snprintf(b->why, sizeof(b->why),
                          "the grammar's check of the next token ran past %zu parse-stack elements or %zu candidate "
                          "looks (an ambiguous grammar; --limit grammar-states)",
                          a.w.budget, a.max_visits);
            break;
        }
        level = std::move(next);
        ways = std::move(next_ways);
    }
    if (b->blown) { /* nothing may follow: the caller ends the request */
        for (size_t i = 0; i < cur->size; i++)
            cur->data[i].logit = -INFINITY;
        return;
    }
    for (size_t t = 0; t < a.toks.size(); t++)
        if (!a.allowed[t]) cur->data[a.toks[t].index].logit = -INFINITY;
}

llama_sampler *bg_clone(const llama_sampler *s);

void bg_free(llama_sampler *s) {
    auto *b = static_cast<bounded_grammar *>(s->ctx);
    if (b->g) llama_grammar_free_impl(b->g);
    delete b;
}

llama_sampler_i bg_iface = {bg_name, bg_accept, bg_apply, nullptr, bg_clone, bg_free,
                            nullptr, nullptr,   nullptr,  nullptr, nullptr,  nullptr};

llama_sampler *bg_clone(const llama_sampler *s) {
    const auto *b = static_cast<const bounded_grammar *>(s->ctx);
    try {
        std::unique_ptr<bounded_grammar> c(new bounded_grammar(*b));
        c->g = llama_grammar_clone_impl(*b->g);
        if (!c->g) return nullptr;
        llama_sampler *out = llama_sampler_init(&bg_iface, c.get());
        if (out)
            c.release();
        else
            llama_grammar_free_impl(c->g);
        return out;
    } catch (...) {
        return nullptr;
    }
}

} // namespace

extern "C" struct llama_sampler *cb_common_grammar_new(const struct llama_vocab *vocab, const char *gbnf, bool lazy,
                                                       const char *const *patterns, size_t n_patterns,
                                                       const int32_t *tokens, size_t n_tokens,
                                                       const cb_grammar_limits *lim, char *err, size_t errlen) {
    return guarded(err, errlen, "the grammar cannot be used", [&]() -> llama_sampler * {
        if (!grammar_fits(vocab, gbnf, *lim, err, errlen)) return nullptr;
        std::vector<const char *> pats(patterns, patterns + n_patterns);
        llama_grammar *g = llama_grammar_init_impl(vocab, gbnf, "root", lazy, const_cast<const char **>(pats.data()),
                                                   pats.size(), tokens, n_tokens);
        if (!g) {
            set_err(err, errlen, "the grammar does not parse as GBNF with a root rule (or is left-recursive)", nullptr);
            return nullptr;
        }
        std::unique_ptr<bounded_grammar> b(new bounded_grammar{vocab, g, *lim, false, "", 0, 0, false, nullptr});
        note_states(b.get());
        llama_sampler *s = llama_sampler_init(&bg_iface, b.get());
        if (!s) {
            llama_grammar_free_impl(g);
            throw std::bad_alloc();
        }
        b.release();
        return s;
    });
}

namespace {

/* A stack as (rule, element) places, comparable across two copies of a grammar. */
std::vector<std::pair<size_t, size_t>> places_of(const llama_grammar_rules &rules, const llama_grammar_stack &st) {
    std::vector<std::pair<size_t, size_t>> out;
    for (const llama_grammar_element *e : st) {
        std::pair<size_t, size_t> at{SIZE_MAX, SIZE_MAX};
        for (size_t r = 0; r < rules.size() && at.first == SIZE_MAX; r++)
            if (!rules[r].empty() && e >= rules[r].data() && e < rules[r].data() + rules[r].size())
                at = {r, (size_t)(e - rules[r].data())};
        out.push_back(at);
    }
    return out;
}

std::vector<std::vector<std::pair<size_t, size_t>>> state_places(const llama_grammar &g) {
    std::vector<std::vector<std::pair<size_t, size_t>>> out;
    for (const auto &st : g.stacks)
        out.push_back(places_of(g.rules, st));
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

} // namespace

extern "C" bool cb_common_grammar_twin_check(struct llama_sampler *s, const struct llama_token_data_array *cur,
                                             int32_t tok, char *why, size_t whylen) {
    if (!s || s->iface != &bg_iface) return false;
    auto *b = static_cast<bounded_grammar *>(s->ctx);
    set_err(why, whylen, "", nullptr);
    if (b->blown) return true;
    std::unique_ptr<llama_grammar, void (*)(llama_grammar *)> twin(llama_grammar_clone_impl(*b->g),
                                                                   llama_grammar_free_impl);
    std::vector<llama_token_data> ours(cur->data, cur->data + cur->size), theirs = ours;
    llama_token_data_array a = *cur, t = *cur;
    a.data = ours.data();
    t.data = theirs.data();
    b->twin = true;
    llama_sampler_apply(s, &a);
    b->twin = false;
    if (b->blown) return true;           /* llama.cpp's own might not end */
    if (b->last_cost > 1e7) return true; /* nor take its time */
    llama_grammar_apply_impl(*twin, &t);
    for (size_t i = 0; i < cur->size; i++) {
        if (std::isinf(ours[i].logit) != std::isinf(theirs[i].logit)) {
            std::snprintf(why, whylen, "token %d: ours %s it, llama.cpp's %s it", (int)ours[i].id,
                          std::isinf(ours[i].logit) ? "refuses" : "allows",
                          std::isinf(theirs[i].logit) ? "refuses" : "allows");
            return false;
        }
    }
    if (tok < 0) return true;
    llama_sampler_accept(s, tok);
    if (b->blown || b->last_accept_cost > 1e7) return true;
    try {
        llama_grammar_accept_impl(*twin, tok);
    } catch (const std::exception &e) {
        std::snprintf(why, whylen, "token %d: llama.cpp's accept threw (%s), ours took it", (int)tok, e.what());
        return false;
    }
    if (state_places(*b->g) != state_places(*twin)) {
        std::snprintf(why, whylen, "token %d: %zu parse states here, %zu in llama.cpp's", (int)tok, b->g->stacks.size(),
                      twin->stacks.size());
        return false;
    }
    const llama_partial_utf8 p = b->g->partial_utf8, q = twin->partial_utf8;
    if (p.n_remain != q.n_remain || (p.n_remain > 0 && p.value != q.value)) {
        std::snprintf(why, whylen, "token %d: a cut character read differently", (int)tok);
        return false;
    }
    return true;
}

extern "C" bool cb_common_grammar_blown(const struct llama_sampler *s, const char **why) {
    if (!s || s->iface != &bg_iface) return false;
    const auto *b = static_cast<const bounded_grammar *>(s->ctx);
    if (why) *why = b->why;
    return b->blown;
}
