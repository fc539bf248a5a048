/*
 * progress.c - the batch progress bar of `animegan convert` on stderr: count, images per
 * second and ETA, redrawn in place. Only on a terminal: on a pipe or in a log file the
 * carriage returns would be noise, so there the command prints only errors.
 */
#include "commands.h"

#include <sys/ioctl.h>
#include <unistd.h>

static double now_s(void) {
    return (double)ag_now_us() * 1e-6;
}

static int terminal_columns(void) {
    struct winsize ws;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    return 80;
}

static void format_duration(char *buf, size_t size, double seconds) {
    long s = (long)(seconds + 0.5);
    if (s >= 3600)
        snprintf(buf, size, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(buf, size, "%ld:%02ld", s / 60, s % 60);
}

static void draw(ag_progress *p) {
    double elapsed = now_s() - p->start_s;
    double rate = elapsed > 0 ? p->done / elapsed : 0;
    char eta[32] = "--:--";
    if (rate > 0)
        format_duration(eta, sizeof eta, (p->total - p->done) / rate);

    char tail[128];
    int tail_len =
        snprintf(tail, sizeof tail, " %d/%d  %.2f img/s  ETA %s", p->done, p->total, rate, eta);
    if (p->stage && tail_len < 96)
        tail_len += snprintf(tail + tail_len, sizeof tail - (size_t)tail_len, "  %s %d/%d",
                             p->stage, p->stage_done, p->stage_total);
    /* The bar takes what the text leaves of the line, so it never wraps. */
    int bar = terminal_columns() - tail_len - 3;
    if (bar > 40)
        bar = 40;
    fputs("\r[", stderr);
    for (int i = 0; i < bar; i++)
        fputc(i < (long)bar * p->done / (p->total ? p->total : 1) ? '#' : '.', stderr);
    fprintf(stderr, "]%s\033[K", tail);
    fflush(stderr);
    p->drawn = 1;
}

void ag_progress_init(ag_progress *progress, int total, int quiet) {
    *progress = (ag_progress){0};
    progress->enabled = !quiet && isatty(STDERR_FILENO);
    progress->total = total;
    progress->start_s = now_s();
}

void ag_progress_start(ag_progress *progress) {
    /* The empty bar tells the user the batch has begun before the first image is done. */
    progress->start_s = now_s();
    if (progress->enabled)
        draw(progress);
}

void ag_progress_step(ag_progress *progress, int ok) {
    progress->done++;
    if (!ok)
        progress->failed++;
    if (progress->enabled)
        draw(progress);
}

int ag_progress_stage(void *user, int done, int total) {
    ag_progress *p = user;
    p->stage_done = done, p->stage_total = total;
    if (p->enabled)
        draw(p);
    return 0;
}

void ag_progress_clear(ag_progress *progress) {
    if (progress->drawn) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
        progress->drawn = 0;
    }
}

void ag_progress_finish(ag_progress *progress) {
    if (!progress->enabled)
        return;
    ag_progress_clear(progress);
    char took[32];
    format_duration(took, sizeof took, now_s() - progress->start_s);
    fprintf(stderr, "%s %d of %d images in %s", progress->verb ? progress->verb : "converted",
            progress->done - progress->failed, progress->total, took);
    if (progress->failed)
        fprintf(stderr, " (%d failed)", progress->failed);
    fputc('\n', stderr);
}
