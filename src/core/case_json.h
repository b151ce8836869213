/* case_json.h - the case's JSON writer, for callers that stream it into a larger text
 * (library-internal; the public forms are af_case_to_json and af_case_to_cjson in
 * attnfuzz/case.h, which parse this writer's text). */
#ifndef ATTNFUZZ_CASE_JSON_H
#define ATTNFUZZ_CASE_JSON_H

#include "attnfuzz/case.h"
#include "json_write.h"

/* Writes c as the "case" object of case.json (docs/case-json.md) at w's position: every
 * field, enums by name, numbers exact. */
void af_case_write_json(af_jw *w, const af_case *c);

#endif
