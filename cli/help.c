/*
 * help.c - the lines of --help that the step table writes (src/pipeline/options.c): for
 * convert, restore, upscale and fuse, every step option the command takes, grouped by step,
 * with its value, help text, range, default and choices, wrapped at 80 columns. A new row
 * is in its commands' help with no other edit; the commands' own options stay in their
 * hand-written text.
 */
#include "commands.h"

#include <getopt.h>
#include <string.h>

#define HELP_COLUMNS 80

static const char *const step_headings[AG_STEP_COUNT] = {
    [AG_STEP_FUSE] = "Fusion",
    [AG_STEP_RESTORE] = "Face restoration",
    [AG_STEP_STYLIZE] = "Style",
    [AG_STEP_UPSCALE] = "Upscaling",
};

/* The entry of --name in the command's getopt table (NULL: none). */
static const struct option *table_entry(const struct option *table, const char *name) {
    for (; table && table->name; table++)
        if (!strcmp(table->name, name))
            return table;
    return NULL;
}

/* "0-1", "-1..1", "4096-1073741824": the row's range as --help and docs state it. */
static void format_range(const ag_step_option *o, char *buf, size_t cap) {
    const char *f = o->type == AG_OPTION_INT ? "%.0f%s%.0f" : "%g%s%g";
    snprintf(buf, cap, f, o->min, o->min < 0 ? ".." : "-", o->max);
}

/* The row's help with what the table knows added: "(range; default: D)" (the default the
 * text states in its own "(default: ...)", else the row's when it is in the range), or the
 * default of a choice. */
static void row_text(const ag_step_option *o, char *buf, size_t cap) {
    int numeric = !o->choices && (o->type == AG_OPTION_INT || o->type == AG_OPTION_FLOAT);
    if (o->choices && o->def >= 0) {
        snprintf(buf, cap, "%s (default: %s)", o->help, o->choices[(int)o->def]);
        return;
    }
    if (!numeric) {
        snprintf(buf, cap, "%s", o->help);
        return;
    }
    char range[64];
    format_range(o, range, sizeof range);
    const char *def = strstr(o->help, " (default: ");
    if (def)
        snprintf(buf, cap, "%.*s (%s; %s", (int)(def - o->help), o->help, range, def + 2);
    else if (o->def >= o->min && o->def <= o->max)
        snprintf(buf, cap,
                 o->type == AG_OPTION_INT ? "%s (%s; default: %.0f)" : "%s (%s; default: %g)",
                 o->help, range, o->def);
    else
        snprintf(buf, cap, "%s (%s)", o->help, range);
}

/* The option's own part: "  -m, --model NAME|PATH", "      --portrait[=face|center]". */
static int option_words(const ag_step_option *o, const struct option *entry, const char *shorts,
                        char *buf, size_t cap) {
    char value[96] = "";
    if (o->choices) {
        size_t len = 0;
        for (int i = 0; o->choices[i] && len < sizeof value; i++)
            len += (size_t)snprintf(value + len, sizeof value - len, "%s%s", i ? "|" : "",
                                    o->choices[i]);
    } else if (o->arg) {
        snprintf(value, sizeof value, "%s", o->arg);
    }
    int letter = entry && entry->val > 0 && entry->val < 128 && strchr(shorts, entry->val);
    int optional = entry && entry->has_arg == optional_argument;
    int n = letter ? snprintf(buf, cap, "  -%c, --%s", entry->val, o->name)
                   : snprintf(buf, cap, "      --%s", o->name);
    if (value[0] && n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, optional ? "[=%s]" : " %s", value);
    return n;
}

/* `text` from column `column` on, wrapped at HELP_COLUMNS; the first line continues `at`. */
static void print_wrapped(const char *text, int column, int at) {
    while (*text) {
        while (*text == ' ')
            text++;
        size_t word = strcspn(text, " ");
        if (word >= 8 && !strncmp(text + word - 8, "default:", 8) && text[word]) /* with D */
            word += 1 + strcspn(text + word + 1, " ");
        if (at > column && at + 1 + (int)word > HELP_COLUMNS) {
            printf("\n%*s", column, "");
            at = column;
        }
        if (at > column)
            putchar(' '), at++;
        printf("%.*s", (int)word, text);
        at += (int)word;
        text += word;
    }
    putchar('\n');
}

static void print_row(const ag_step_option *o, const struct option *table, const char *shorts,
                      int column) {
    char words[160], text[768];
    int at = option_words(o, table_entry(table, o->name), shorts, words, sizeof words);
    fputs(words, stdout);
    if (at < column)
        printf("%*s", column - at, "");
    else
        printf("\n%*s", column, "");
    row_text(o, text, sizeof text);
    print_wrapped(text, column, column);
}

void ag_cli_print_step_help(int command, const struct option *table, const char *shorts,
                            int column) {
    int count;
    const ag_step_option *o = ag_step_options(&count);
    for (int step = 0; step < AG_STEP_COUNT; step++) {
        int heading = 0;
        for (int i = 0; i < count; i++) {
            if ((int)o[i].step != step || !(o[i].commands & command))
                continue;
            if (!heading++)
                printf("\n%s:\n", step_headings[step]);
            print_row(&o[i], table, shorts, column);
        }
    }
}
