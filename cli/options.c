/*
 * options.c - command-line helpers shared by the subcommands: checked integer parsing, the
 * engine options common to convert and bench, and the one-line error reports.
 */
#include "commands.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int ag_cli_usage_error(const char *command, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("animegan: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (command)
        fprintf(stderr, "\nTry 'animegan %s --help'\n", command);
    else
        fputs("\nTry 'animegan --help'\n", stderr);
    return AG_EXIT_USAGE;
}

void ag_cli_report(const ag_error *err) {
    fprintf(stderr, "animegan: %s\n", err->message[0] ? err->message : ag_error_name(err->code));
}

int ag_cli_parse_int(const char *command, const char *option, const char *text, int min, int max,
                     int *out) {
    long long value;
    int rc = ag_parse_int64(text, min, max, &value);
    if (rc == AG_E_ARG) {
        ag_cli_usage_error(command, "--%s: '%s' is not a whole number", option, text);
        return -1;
    }
    if (rc != AG_OK) {
        ag_cli_usage_error(command, "--%s: %s is out of range (%d to %d)", option, text, min, max);
        return -1;
    }
    *out = (int)value;
    return 0;
}

/* The AG_CMD_* bit of a command's name; every bit for the others (bench, video). */
static int command_bit(const char *command) {
    static const char *const names[] = {"convert", "restore", "upscale", "fuse"};
    for (int i = 0; command && i < 4; i++)
        if (!strcmp(command, names[i]))
            return 1 << i;
    return ~0;
}

int ag_cli_parse_step_int(const char *command, const char *option, const char *text, int *out) {
    const ag_step_option *o = ag_step_option_of(command_bit(command), option);
    if (!o || o->type != AG_OPTION_INT) { /* a programming error, caught by any test run */
        ag_cli_usage_error(command, "--%s: not an integer option of the step table", option);
        return -1;
    }
    return ag_cli_parse_int(command, option, text, (int)o->min, (int)o->max, out);
}

int ag_cli_parse_step_float(const char *command, const char *option, const char *text, float *out) {
    const ag_step_option *o = ag_step_option_of(command_bit(command), option);
    char *end;
    double v = strtod(text, &end);
    if (!o || end == text || *end || !(v >= o->min && v <= o->max)) {
        ag_cli_usage_error(command, "--%s: '%s' is not a number from %g to %g", option, text,
                           o ? o->min : 0.0, o ? o->max : 0.0);
        return -1;
    }
    *out = (float)v;
    return 0;
}

int ag_cli_parse_step_choice(const char *command, const char *option, const char *text) {
    const ag_step_option *o = ag_step_option_of(command_bit(command), option);
    int i = o ? ag_step_option_choice(o, text) : -1;
    if (i < 0 && o && o->choices) {
        char spelled[48], message[256];
        snprintf(spelled, sizeof spelled, "--%s", option);
        ag_cli_usage_error(command, "%s",
                           ag_step_option_refusal(o, spelled, NULL, text, message, sizeof message));
    } else if (i < 0) { /* a programming error, caught by any test run */
        ag_cli_usage_error(command, "--%s: not a choice option of the step table", option);
    }
    return i;
}

static const char *const backend_names[] = {"onednn", "reference"};

const char *ag_cli_precision_name(ag_precision precision) {
    return ag_precision_name(precision);
}

const char *ag_cli_backend_name(ag_backend backend) {
    return (unsigned)backend < 2 ? backend_names[backend] : "?";
}

/* Index of `text` in `names`, -1 when absent. */
static int lookup(const char *text, const char *const *names, int count) {
    for (int i = 0; i < count; i++)
        if (strcmp(text, names[i]) == 0)
            return i;
    return -1;
}

void ag_cli_engine_args_init(ag_cli_engine_args *args) {
    memset(args, 0, sizeof *args);
    args->model = "hayao";
    args->engine.backend = AG_BACKEND_ONEDNN;
    args->engine.precision = AG_PRECISION_AUTO;
    args->engine.threads = 0;
    args->engine.resize = AG_RESIZE_DEFAULT;
}

int ag_cli_engine_option(const char *command, int opt, const char *arg, ag_cli_engine_args *args) {
    int value;
    switch (opt) {
    case 'm':
        if (arg[0] == '\0')
            return ag_cli_usage_error(command, "--model: empty name"), -1;
        args->model = arg;
        return 1;
    case 't':
        /* 0 keeps the default: every core the process may use. */
        if (ag_cli_parse_int(command, "threads", arg, 0, 4096, &args->engine.threads))
            return -1;
        return 1;
    case 'P':
        if ((value = ag_precision_parse(arg)) < 0)
            return ag_cli_usage_error(command, "--precision: '%s' is not fp32, bf16, int8 or auto",
                                      arg),
                   -1;
        args->engine.precision = (ag_precision)value;
        return 1;
    case 'B':
        if ((value = lookup(arg, backend_names, 2)) < 0)
            return ag_cli_usage_error(command, "--backend: '%s' is not onednn or reference", arg),
                   -1;
        args->engine.backend = (ag_backend)value;
        return 1;
    case 'U':
        if ((value = ag_resize_mode_parse(arg)) < 0)
            return ag_cli_usage_error(
                       command, "--upsample: '%s' is not asymmetric, align-corners or half-pixel",
                       arg),
                   -1;
        args->engine.resize = (ag_resize_mode)value;
        return 1;
    default: return 0;
    }
}

int ag_cli_option_table_asked(int argc, char **argv) {
    return argc == 2 && !strcmp(argv[1], "--option-table");
}

/* Whether `name` is in the NULL-terminated `names`. */
static int listed(const char *name, const char *const *names) {
    for (; names && *names; names++)
        if (!strcmp(name, *names))
            return 1;
    return 0;
}

int ag_cli_print_option_table(const struct option *table, const char *const *refused) {
    static const char *const kinds[] = {"none", "required", "optional"};
    for (; table->name; table++)
        if (!listed(table->name, refused))
            printf("--%s %s\n", table->name, kinds[table->has_arg & 3]);
    return AG_EXIT_OK;
}

int ag_cli_bad_option(const char *command, int opt, int optopt_value, const char *word) {
    if (opt == ':')
        return ag_cli_usage_error(command, "option '%s' needs a value", word);
    /* An unknown short option inside a group ("-qx") is reported by its letter. */
    if (optopt_value > 0 && optopt_value < 128 && strncmp(word, "--", 2) != 0)
        return ag_cli_usage_error(command, "unknown option '-%c'", optopt_value);
    return ag_cli_usage_error(command, "unknown or malformed option '%s'", word);
}

int ag_cli_resolve_precision(ag_engine_options *options, ag_precision_choice *choice) {
    if (ag_precision_resolve(options->precision, options->backend, NULL, choice) != 0) {
        fprintf(stderr, "animegan: %s\n", choice->note[0] ? choice->note : "bad precision");
        return -1;
    }
    options->precision = choice->precision;
    if (choice->emulated)
        fprintf(stderr, "animegan: %s\n", choice->note);
    return 0;
}
