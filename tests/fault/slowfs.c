/*
 * slowfs: a FUSE file system that passes every call through to a directory, and makes writes and fsyncs as slow
 * as a dying disk, or fail as a failing one does. For the fault tests (tests/fault/slow_disk.py builds and mounts
 * it).
 *
 *   slowfs BACKING_DIR MOUNTPOINT CONTROL_FILE [fuse options...]
 *
 * CONTROL_FILE holds three numbers, read at start and again whenever it changes (replace it whole): the
 * milliseconds every write takes, the milliseconds every fsync takes, and 1 to make writes and fsyncs fail with EIO
 * (0 otherwise). The writes of
 * pages dirtied through a shared mapping reach the file system as writes too: while one is delayed, the kernel
 * keeps those pages under writeback, and a process that writes into one of them waits for it, as it would for a
 * slow device.
 */
#define FUSE_USE_VERSION 31
#define _GNU_SOURCE

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static char backing[PATH_MAX];
static const char *control_path;
static atomic_int write_ms, fsync_ms, failing;

static void read_control(void) {
    FILE *f = fopen(control_path, "r");
    int w = 0, s = 0, fail = 0;
    if (f == NULL)
        return;
    if (fscanf(f, "%d %d %d", &w, &s, &fail) >= 2) {
        atomic_store(&write_ms, w);
        atomic_store(&fsync_ms, s);
        atomic_store(&failing, fail);
    }
    fclose(f);
}

/* The control file is looked at before every write and fsync: re-read when its modification time changed. */
static pthread_mutex_t control_lock = PTHREAD_MUTEX_INITIALIZER;
static struct timespec control_mtime;

static void check_control(void) {
    struct stat st;
    if (stat(control_path, &st) == -1)
        return;
    pthread_mutex_lock(&control_lock);
    if (st.st_mtim.tv_sec != control_mtime.tv_sec || st.st_mtim.tv_nsec != control_mtime.tv_nsec) {
        control_mtime = st.st_mtim;
        read_control();
    }
    pthread_mutex_unlock(&control_lock);
}

static void pause_ms(int ms) {
    if (ms <= 0)
        return;
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void full(char out[PATH_MAX], const char *path) { snprintf(out, PATH_MAX, "%s%s", backing, path); }

static void *sfs_init(struct fuse_conn_info *conn, struct fuse_config *cfg) {
    (void)conn;
    cfg->use_ino = 1;
    cfg->nullpath_ok = 0;
    return NULL;
}

static int sfs_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
    char p[PATH_MAX];
    int r;
    if (fi != NULL)
        r = fstat((int)fi->fh, st);
    else {
        full(p, path);
        r = lstat(p, st);
    }
    return r == -1 ? -errno : 0;
}

static int sfs_access(const char *path, int mask) {
    char p[PATH_MAX];
    full(p, path);
    return access(p, mask) == -1 ? -errno : 0;
}

static int sfs_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off, struct fuse_file_info *fi,
                       enum fuse_readdir_flags flags) {
    char p[PATH_MAX];
    (void)off;
    (void)fi;
    (void)flags;
    full(p, path);
    DIR *d = opendir(p);
    if (d == NULL)
        return -errno;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        memset(&st, 0, sizeof st);
        st.st_ino = e->d_ino;
        st.st_mode = (mode_t)e->d_type << 12;
        if (fill(buf, e->d_name, &st, 0, 0))
            break;
    }
    closedir(d);
    return 0;
}

static int sfs_mkdir(const char *path, mode_t mode) {
    char p[PATH_MAX];
    full(p, path);
    return mkdir(p, mode) == -1 ? -errno : 0;
}

static int sfs_rmdir(const char *path) {
    char p[PATH_MAX];
    full(p, path);
    return rmdir(p) == -1 ? -errno : 0;
}

static int sfs_unlink(const char *path) {
    char p[PATH_MAX];
    full(p, path);
    return unlink(p) == -1 ? -errno : 0;
}

static int sfs_rename(const char *from, const char *to, unsigned int flags) {
    char a[PATH_MAX], b[PATH_MAX];
    if (flags != 0)
        return -EINVAL;
    full(a, from);
    full(b, to);
    return rename(a, b) == -1 ? -errno : 0;
}

static int sfs_chmod(const char *path, mode_t mode, struct fuse_file_info *fi) {
    char p[PATH_MAX];
    if (fi != NULL)
        return fchmod((int)fi->fh, mode) == -1 ? -errno : 0;
    full(p, path);
    return chmod(p, mode) == -1 ? -errno : 0;
}

static int sfs_truncate(const char *path, off_t size, struct fuse_file_info *fi) {
    char p[PATH_MAX];
    if (fi != NULL)
        return ftruncate((int)fi->fh, size) == -1 ? -errno : 0;
    full(p, path);
    return truncate(p, size) == -1 ? -errno : 0;
}

static int sfs_utimens(const char *path, const struct timespec tv[2], struct fuse_file_info *fi) {
    char p[PATH_MAX];
    if (fi != NULL)
        return futimens((int)fi->fh, tv) == -1 ? -errno : 0;
    full(p, path);
    return utimensat(AT_FDCWD, p, tv, AT_SYMLINK_NOFOLLOW) == -1 ? -errno : 0;
}

static int sfs_open(const char *path, struct fuse_file_info *fi) {
    char p[PATH_MAX];
    full(p, path);
    int fd = open(p, fi->flags & ~O_DIRECT);
    if (fd == -1)
        return -errno;
    fi->fh = (uint64_t)fd;
    return 0;
}

static int sfs_create(const char *path, mode_t mode, struct fuse_file_info *fi) {
    char p[PATH_MAX];
    full(p, path);
    int fd = open(p, (fi->flags & ~O_DIRECT) | O_CREAT, mode);
    if (fd == -1)
        return -errno;
    fi->fh = (uint64_t)fd;
    return 0;
}

static int sfs_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)path;
    ssize_t n = pread((int)fi->fh, buf, size, off);
    return n == -1 ? -errno : (int)n;
}

static int sfs_write(const char *path, const char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)path;
    check_control();
    pause_ms(atomic_load(&write_ms));
    if (atomic_load(&failing))
        return -EIO;
    ssize_t n = pwrite((int)fi->fh, buf, size, off);
    return n == -1 ? -errno : (int)n;
}

static int sfs_statfs(const char *path, struct statvfs *st) {
    char p[PATH_MAX];
    full(p, path);
    return statvfs(p, st) == -1 ? -errno : 0;
}

static int sfs_flush(const char *path, struct fuse_file_info *fi) {
    (void)path;
    int fd = dup((int)fi->fh); /* close(dup) reports the errors a close would, without closing ours */
    if (fd == -1)
        return -errno;
    return close(fd) == -1 ? -errno : 0;
}

static int sfs_release(const char *path, struct fuse_file_info *fi) {
    (void)path;
    close((int)fi->fh);
    return 0;
}

static int sfs_fsync(const char *path, int datasync, struct fuse_file_info *fi) {
    (void)path;
    check_control();
    pause_ms(atomic_load(&fsync_ms));
    if (atomic_load(&failing))
        return -EIO;
    int r = datasync ? fdatasync((int)fi->fh) : fsync((int)fi->fh);
    return r == -1 ? -errno : 0;
}

static int sfs_fsyncdir(const char *path, int datasync, struct fuse_file_info *fi) {
    char p[PATH_MAX];
    (void)datasync;
    (void)fi;
    check_control();
    pause_ms(atomic_load(&fsync_ms));
    if (atomic_load(&failing))
        return -EIO;
    full(p, path);
    int fd = open(p, O_RDONLY | O_DIRECTORY);
    if (fd == -1)
        return -errno;
    int r = fsync(fd);
    int e = errno;
    close(fd);
    return r == -1 ? -e : 0;
}

static int sfs_fallocate(const char *path, int mode, off_t off, off_t len, struct fuse_file_info *fi) {
    (void)path;
    return fallocate((int)fi->fh, mode, off, len) == -1 ? -errno : 0;
}

static const struct fuse_operations ops = {
    .init = sfs_init,
    .getattr = sfs_getattr,
    .access = sfs_access,
    .readdir = sfs_readdir,
    .mkdir = sfs_mkdir,
    .rmdir = sfs_rmdir,
    .unlink = sfs_unlink,
    .rename = sfs_rename,
    .chmod = sfs_chmod,
    .truncate = sfs_truncate,
    .utimens = sfs_utimens,
    .open = sfs_open,
    .create = sfs_create,
    .read = sfs_read,
    .write = sfs_write,
    .statfs = sfs_statfs,
    .flush = sfs_flush,
    .release = sfs_release,
    .fsync = sfs_fsync,
    .fsyncdir = sfs_fsyncdir,
    .fallocate = sfs_fallocate,
};

int main(int argc, char *argv[]) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s BACKING_DIR MOUNTPOINT CONTROL_FILE [fuse options...]\n", argv[0]);
        return 2;
    }
    if (realpath(argv[1], backing) == NULL) {
        perror(argv[1]);
        return 2;
    }
    static char control[PATH_MAX]; /* (absolute: the daemon's working directory becomes /) */
    if (realpath(argv[3], control) == NULL) {
        perror(argv[3]);
        return 2;
    }
    control_path = control;
    check_control();
    /* fuse_main(argv0, mountpoint, -f, the caller's options...) */
    char **fargv = calloc((size_t)argc + 2, sizeof *fargv);
    int n = 0;
    fargv[n++] = argv[0];
    fargv[n++] = argv[2];
    fargv[n++] = "-f";
    for (int i = 4; i < argc; i++)
        fargv[n++] = argv[i];
    return fuse_main(n, fargv, &ops, NULL);
}
