// llama_common.cpp — see llama_common.h. C++ stays inside this file: exceptions end here as errors.
#include "llama_common.h"

#include "chat.h"
#include "json-schema-to-grammar.h"
#include "json.h"
#include "llama.h"
#include "log.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
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
};

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
        return c.release();
    });
}

extern "C" void cb_common_templates_free(cb_chat_templates *t) { delete t; }

extern "C" const char *cb_common_template_source(const cb_chat_templates *t) { return t->source.c_str(); }

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

std::vector<common_chat_msg> to_msgs(const cb_common_msg *msgs, size_t n) {
    std::vector<common_chat_msg> out;
    for (size_t i = 0; i < n; i++) {
        common_chat_msg m;
        m.role = msgs[i].role ? msgs[i].role : "user";
        m.content = msgs[i].content ? msgs[i].content : "";
        if (msgs[i].tool_call_id) m.tool_call_id = msgs[i].tool_call_id;
        if (msgs[i].name) m.tool_name = msgs[i].name;
        if (msgs[i].tool_calls)
            for (const auto &c : common_json::parse(msgs[i].tool_calls)) {
                common_chat_tool_call tc;
                const auto &f = c.at("function");
                tc.name = f.at("name").get<std::string>();
                const auto &a = f.at("arguments");
                tc.arguments = a.is_string() ? a.get<std::string>() : a.dump();
                if (c.contains("id") && c.at("id").is_string()) tc.id = c.at("id").get<std::string>();
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
 * small model fills until it runs out of tokens; the optional text goes. */
void calls_first(std::string &g) {
    size_t r = rule_at(g, "root");
    if (r == std::string::npos) return;
    size_t end = g.find('\n', r);
    if (end == std::string::npos) end = g.size();
    size_t u = g.find(" until-", r);
    if (u == std::string::npos || u > end) return;
    size_t q = g.find('?', u);
    if (q == std::string::npos || q > end || g.find(' ', u + 1) < q) return;
    g.erase(u, q + 1 - u);
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

extern "C" int cb_common_render(const cb_chat_templates *t, const cb_common_msg *msgs, size_t n,
                                const cb_common_tools *tools, cb_common_rendered *out, char *err, size_t errlen) {
    *out = cb_common_rendered{};
    bool with_tools = tools && tools->tools;
    void *ok = guarded(err, errlen, "the chat template failed", [&]() -> void * {
        common_chat_templates_inputs in;
        in.use_jinja = true;
        in.add_generation_prompt = true;
        try {
            in.messages = to_msgs(msgs, n);
            if (with_tools) in.tools = common_chat_tools_parse_oaicompat(common_json::parse(tools->tools));
        } catch (const std::bad_alloc &) {
            throw;
        } catch (const std::exception &e) { /* the OpenAI layer checked the shapes: not expected */
            set_err(err, errlen, "the tools or tool calls cannot be read", e.what());
            return nullptr;
        }
        /* no tools: the rendering only, no tool-call parser is worked out (the fast path) */
        in.force_pure_content = !with_tools;
        in.tool_choice = !with_tools                      ? COMMON_CHAT_TOOL_CHOICE_NONE
                         : tools->choice == CB_TOOLS_NONE ? COMMON_CHAT_TOOL_CHOICE_NONE
                         : tools->choice == CB_TOOLS_AUTO ? COMMON_CHAT_TOOL_CHOICE_AUTO
                                                          : COMMON_CHAT_TOOL_CHOICE_REQUIRED;
        in.parallel_tool_calls = with_tools && !tools->single;
        common_chat_params p = common_chat_templates_apply(t->t.get(), in);
        out->prompt = dup_or_throw(p.prompt);
        if (!with_tools || tools->choice == CB_TOOLS_NONE) return out;
        if (tools->function) { /* the prompt lists every tool; the grammar and parser know the named one */
            std::vector<common_chat_tool> all = std::move(in.tools);
            in.tools.clear();
            for (auto &x : all)
                if (x.name == tools->function) in.tools.push_back(x);
            p = common_chat_templates_apply(t->t.get(), in);
        }
        if (p.grammar.empty() || p.parser.empty()) {
            set_err(err, errlen, "the chat template has no tool-call format",
                    "give the server a template that offers tools (--chat-template)");
            return nullptr;
        }
        if (!p.grammar_lazy) calls_first(p.grammar);
        bool single = tools->single && !one_call(p.grammar);
        out->grammar = dup_or_throw(p.grammar);
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
        out->stops = dup_all(p.additional_stops, &out->n_stops);
        out->preserved = dup_all(p.preserved_tokens, &out->n_preserved);
        std::unique_ptr<cb_chat_parser> parser(new cb_chat_parser());
        parser->params = common_chat_parser_params(p);
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
    *r = cb_common_rendered{};
}

extern "C" struct llama_sampler *cb_common_grammar_sampler(const struct llama_vocab *vocab, const cb_common_rendered *r,
                                                           char *err, size_t errlen) {
    return guarded(err, errlen, "the tool-call grammar failed", [&]() -> llama_sampler * {
        std::vector<const char *> patterns(r->patterns, r->patterns + r->n_patterns);
        llama_sampler *g =
            r->lazy ? llama_sampler_init_grammar_lazy_patterns(vocab, r->grammar, "root", patterns.data(),
                                                               patterns.size(), r->trigger_tokens, r->n_trigger_tokens)
                    : llama_sampler_init_grammar(vocab, r->grammar, "root");
        if (!g) {
            set_err(err, errlen, "the tool-call grammar does not parse", nullptr);
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

extern "C" int cb_common_parse(const cb_chat_parser *p, const char *text, size_t len, bool partial, char **content,
                               cb_common_call **calls, size_t *n_calls, char *err, size_t errlen) {
    *content = nullptr;
    *calls = nullptr;
    *n_calls = 0;
    void *ok = guarded(err, errlen, "the output cannot be read", [&]() -> void * {
        common_chat_msg m = common_chat_parse(std::string(text, len), partial, p->params);
        size_t k = p->single && m.tool_calls.size() > 1 ? 1 : m.tool_calls.size();
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
    std::free(*content);
    cb_common_calls_free(*calls, *n_calls);
    *content = nullptr;
    *calls = nullptr;
    *n_calls = 0;
    return -1;
}
