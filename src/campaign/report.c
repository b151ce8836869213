/* report.c - the campaign's console (see report.h). */
#include "report.h"

#include <stdint.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <unistd.h>

static void af_report_kinds(const af_campaign_stats *s, char *kinds, size_t cap) {
    size_t n = 0;
    kinds[0] = 0;
    for (int k = 1; k < AF_KIND_COUNT && n < cap; k++) {
        if (!s->unique_by_kind[k]) continue;
        int w = snprintf(kinds + n, cap - n, "%s%s %llu", n ? ", " : "", af_kind_names[k],
                         (unsigned long long)s->unique_by_kind[k]);
        if (w > 0) n += (size_t)w;
    }
}

/* "known 37 (jax-xla-masked-rows-mean 20, ...)": hits per known bug, the most first */
static void af_report_known(const af_campaign_stats *s, char *buf, size_t cap) {
    buf[0] = 0;
    if (!s->known_hits) return;
    size_t n = 0;
    int w = snprintf(buf, cap, "known %llu (", (unsigned long long)s->known_hits);
    if (w > 0) n = (size_t)w;
    uint64_t above = UINT64_MAX;
    for (size_t shown = 0; shown < s->n_known && n < cap;) {
        uint64_t best = 0;
        for (size_t i = 0; i < s->n_known; i++)
            if (s->known[i].hits < above && s->known[i].hits > best) best = s->known[i].hits;
        if (!best) break;
        for (size_t i = 0; i < s->n_known && n < cap; i++) {
            if (s->known[i].hits != best) continue;
            w = snprintf(buf + n, cap - n, "%s%s %llu", shown ? ", " : "", s->known[i].id,
                         (unsigned long long)s->known[i].hits);
            if (w > 0) n += (size_t)w;
            shown++;
        }
        above = best;
    }
    if (n < cap) snprintf(buf + n, cap - n, ")");
}

static void af_report_clock(double t, char *buf, size_t cap) {
    unsigned long v = t > 0 ? (unsigned long)t : 0;
    if (v >= 3600)
        snprintf(buf, cap, "%lu:%02lu:%02lu", v / 3600, v / 60 % 60, v % 60);
    else
        snprintf(buf, cap, "%lu:%02lu", v / 60, v % 60);
}

void af_report_status(const af_campaign_stats *s, const af_campaign_opts *o, const char *last, const char *tag,
                      bool tty) {
    char kinds[256], known[512];
    af_report_kinds(s, kinds, sizeof kinds);
    af_report_known(s, known, sizeof known);
    double elapsed = s->elapsed, rate = elapsed > 0 ? (double)s->execs / elapsed : 0.0;
    char died[64] = "";
    if (s->jobs_died)
        snprintf(died, sizeof died, "%sjobs died: %llu%s", tty ? "  " : "\t", (unsigned long long)s->jobs_died,
                 s->jobs_kept_dying ? " (kept dying)" : "");
    if (!tty) {
        fprintf(stderr, "#%llu\t%s execs/s: %.0f\tunique: %zu%s%s%s%s%s\telapsed: %.0fs%s%s%s\n",
                (unsigned long long)s->execs, tag, rate, s->n_sigs, kinds[0] ? " (" : "", kinds, kinds[0] ? ")" : "",
                known[0] ? "\t" : "", known, elapsed, died, last[0] ? "\tlast: " : "", last);
        return;
    }
    char now[32], total[32] = "-", line[1024];
    af_report_clock(elapsed, now, sizeof now);
    if (o->seconds > 0) af_report_clock(o->seconds, total, sizeof total);
    unsigned jobs = o->jobs > 1 ? o->jobs : 1;
    double share = elapsed > 0 ? 100.0 * s->compile_seconds / (elapsed * jobs) : 0.0;
    int n = snprintf(line, sizeof line, "%s%s%s/%s  %.0f execs/s  compile %.0f%%  %zu finding%s%s%s%s%s%s%s%s%s", tag,
                     tag[0] ? " " : "", now, total, rate, share, s->n_sigs, s->n_sigs == 1 ? "" : "s",
                     kinds[0] ? " (" : "", kinds, kinds[0] ? ")" : "", known[0] ? "  " : "", known, died,
                     last[0] ? "  last: " : "", last);
    struct winsize ws;
    size_t width = ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 ? (size_t)ws.ws_col - 1 : 79;
    if (n > 0 && (size_t)n > width && width < sizeof line) line[width] = 0;
    fprintf(stderr, "\r\033[K%s%s", line, tag[0] ? "\n" : "");
    fflush(stderr);
}

bool af_report_event(const af_campaign_stats *s, const af_store_event *ev, bool announce, bool tty, char *last,
                     size_t cap) {
    if (ev->known >= 0) { /* a known bug: counted against its entry (s->known) */
        const af_known_stat *k = &s->known[ev->entry];
        if (!ev->first) return false;
        snprintf(last, cap, "known %s", k->id);
        if (announce) {
            if (tty) fputs("\r\033[K", stderr);
            fprintf(stderr, "KNOWN %s -> %s\n", k->id, k->bundle[0] ? k->bundle : "(counted)");
        }
        return true;
    }
    const af_signature_entry *e = &s->sigs[ev->entry];
    if (!ev->first && !ev->stored && !ev->failed) return false; /* a repeat: counted */
    snprintf(last, cap, "%s %s %016llx", af_kind_names[e->kind], e->who, (unsigned long long)e->signature);
    if (announce && ev->first) {
        if (tty) fputs("\r\033[K", stderr); /* over the updating line */
        fprintf(stderr, "NEW %s %s -> %s%s\n", af_kind_names[e->kind], e->who, e->bundle[0] ? e->bundle : "(not stored)",
                ev->unminimized && e->bundle[0] ? " (as found: minimized later)" : "");
    }
    return true;
}
