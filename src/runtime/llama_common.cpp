// llama_common.cpp — see llama_common.h. C++ stays inside this file: exceptions end here as errors.
#include "llama_common.h"

#include "chat.h"
#include "json-schema-to-grammar.h"
#include "json.h"
#include "llama.h"
#include "log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>

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

extern "C" char *cb_common_render(const cb_chat_templates *t, const char *const *roles, const char *const *contents,
                                  size_t n, char *err, size_t errlen) {
    return guarded(err, errlen, "the chat template failed", [&]() -> char * {
        common_chat_templates_inputs in;
        in.use_jinja = true;
        in.add_generation_prompt = true;
        in.force_pure_content = true; /* the rendering only: no tool-call parser is worked out */
        for (size_t i = 0; i < n; i++) {
            common_chat_msg m;
            m.role = roles[i];
            m.content = contents[i];
            in.messages.push_back(std::move(m));
        }
        return dup_or_err(common_chat_templates_apply(t->t.get(), in).prompt, err, errlen);
    });
}
