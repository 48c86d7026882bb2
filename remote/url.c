/*
 * Addresses: which URLs are remote, and how an s3:// URL becomes a signed
 * path-style request. The AWS settings are read the way the AWS CLI reads
 * them (environment first, then the shared files), so a machine set up for
 * the CLI needs nothing more.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "remote/remote.h"

int feeder__url_kind(const char *s)
{
    if (!s)
        return FEEDER__URL_LOCAL;
    if (!strncasecmp(s, "http://", 7) || !strncasecmp(s, "https://", 8))
        return FEEDER__URL_HTTP;
    if (!strncasecmp(s, "s3://", 5))
        return FEEDER__URL_S3;
    return FEEDER__URL_LOCAL;
}

void feeder__target_free(feeder__target *t)
{
    if (!t)
        return;
    free(t->url);
    free(t->address);
    free(t->sigv4);
    free(t->userpwd);
    free(t->token);
    memset(t, 0, sizeof(*t));
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* A file under ~/.aws, or the variable that overrides it. */
static void aws_file(const char *var, const char *leaf, char *out, size_t len)
{
    const char *v = env(var), *home = env("HOME");
    if (v)
        feeder__fmt(out, len, "%s", v);
    else
        feeder__fmt(out, len, "%s/.aws/%s", home ? home : "", leaf);
}

/* Trim spaces at both ends, in place. */
static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = 0;
    return s;
}

/* `key` in section `section` of an INI file ("" when absent). */
static void ini_get(const char *file, const char *section, const char *key, char *out,
                    size_t len)
{
    out[0] = 0;
    FILE *f = fopen(file, "re");
    if (!f)
        return;
    char line[1024];
    int in = 0;
    while (fgets(line, sizeof(line), f)) {
        char *s = trim(line);
        if (*s == '[') {
            char *end = strchr(s, ']');
            if (end)
                *end = 0;
            in = !strcmp(trim(s + 1), section);
            continue;
        }
        char *eq = strchr(s, '=');
        if (!in || !eq)
            continue;
        *eq = 0;
        if (!strcmp(trim(s), key)) {
            feeder__fmt(out, len, "%s", trim(eq + 1));
            break;
        }
    }
    fclose(f);
}

static void aws_region(char *out, size_t len)
{
    const char *r = env("AWS_REGION");
    if (!r)
        r = env("AWS_DEFAULT_REGION");
    if (r) {
        feeder__fmt(out, len, "%s", r);
        return;
    }
    char file[4096], section[300];
    const char *profile = env("AWS_PROFILE");
    aws_file("AWS_CONFIG_FILE", "config", file, sizeof(file));
    if (profile)
        feeder__fmt(section, sizeof(section), "profile %s", profile);
    else
        feeder__fmt(section, sizeof(section), "default");
    ini_get(file, section, "region", out, len);
    if (!out[0])
        feeder__fmt(out, len, "us-east-1");
}

/* Key, secret and session token: the environment, else the profile. */
static void aws_credentials(char *key, char *secret, char *token, size_t len)
{
    const char *k = env("AWS_ACCESS_KEY_ID"), *s = env("AWS_SECRET_ACCESS_KEY");
    if (k && s) {
        feeder__fmt(key, len, "%s", k);
        feeder__fmt(secret, len, "%s", s);
        feeder__fmt(token, len, "%s", env("AWS_SESSION_TOKEN") ? env("AWS_SESSION_TOKEN") : "");
        return;
    }
    char file[4096];
    const char *profile = env("AWS_PROFILE") ? env("AWS_PROFILE") : "default";
    aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials", file, sizeof(file));
    ini_get(file, profile, "aws_access_key_id", key, len);
    ini_get(file, profile, "aws_secret_access_key", secret, len);
    ini_get(file, profile, "aws_session_token", token, len);
}

static char *dup_fmt(const char *a, const char *b, const char *c)
{
    size_t n = strlen(a) + strlen(b) + strlen(c) + 1;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s%s%s", a, b, c);
    return s;
}

static int resolve_s3(const char *url, feeder__target *t, char *err, size_t errlen)
{
    const char *path = url + 5;
    const char *slash = strchr(path, '/');
    if (!*path || *path == '/' || !slash || !slash[1]) {
        feeder__fmt(err, errlen, "%s: an S3 URL is s3://BUCKET/KEY", url);
        return FEEDER_EINVAL;
    }
    char region[128], key[2048], secret[2048], token[2048], base[4096];
    aws_region(region, sizeof(region));
    aws_credentials(key, secret, token, sizeof(key));
    if (!key[0] || !secret[0]) {
        feeder__fmt(err, errlen,
                    "%s: no S3 credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                    "or a profile in ~/.aws/credentials)",
                    url);
        return FEEDER_EINVAL;
    }
    const char *ep = env("AWS_ENDPOINT_URL_S3") ? env("AWS_ENDPOINT_URL_S3")
                                                : env("AWS_ENDPOINT_URL");
    if (ep)
        feeder__fmt(base, sizeof(base), "%s", ep);
    else
        feeder__fmt(base, sizeof(base), "https://s3.%s.amazonaws.com", region);
    size_t bl = strlen(base);
    if (bl && base[bl - 1] == '/')
        base[bl - 1] = 0;
    t->address = dup_fmt(base, "/", path);
    t->sigv4 = dup_fmt("aws:amz:", region, ":s3");
    t->userpwd = dup_fmt(key, ":", secret);
    if (token[0])
        t->token = dup_fmt("x-amz-security-token: ", token, "");
    if (!t->address || !t->sigv4 || !t->userpwd || (token[0] && !t->token))
        return -ENOMEM;
    return 0;
}

int feeder__target_resolve(const char *url, feeder__target *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    int kind = feeder__url_kind(url);
    if (kind == FEEDER__URL_LOCAL) {
        feeder__fmt(err, errlen, "%s: not an http://, https:// or s3:// URL", url ? url : "(null)");
        return FEEDER_EINVAL;
    }
    if (!(out->url = strdup(url)))
        return -ENOMEM;
    int rc = 0;
    if (kind == FEEDER__URL_S3)
        rc = resolve_s3(url, out, err, errlen);
    else if (!(out->address = strdup(url)))
        rc = -ENOMEM;
    if (rc)
        feeder__target_free(out);
    return rc;
}
