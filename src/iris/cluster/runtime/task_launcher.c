/*
 * Starts one task process for the process runtime, in place of
 * `setpriv --pdeathsig KILL -- /bin/sh -c '[ "$PPID" = "$0" ] && exec "$@"'`: one exec instead of two.
 *
 *     task-launcher <worker pid> <file to execute> <argv[0]> [arguments...]
 *
 * It asks for SIGKILL when the thread that forked it exits, then executes the file only if its
 * parent is still the worker: a worker that died before the signal was armed would never send it.
 * The worker resolves the file against PATH itself (to raise what Popen raises for a command that
 * cannot start), so this runs no search of its own.
 *
 * Built with IRIS_FREESTANDING on x86_64, it is a static program without libc: the exec of
 * libc's startup (the dynamic loader, CPU feature probing that traps to a hypervisor) cost a
 * trivial task more than this program's own work. Elsewhere it is an ordinary C program.
 */

#define EXIT_CANNOT_START 127
#define SIGNAL_KILL 9
#define OPTION_SET_PDEATHSIG 1

#ifdef IRIS_FREESTANDING

#ifndef __x86_64__
#error "no freestanding start for this architecture"
#endif

#define SYS_WRITE 1
#define SYS_EXECVE 59
#define SYS_GETPPID 110
#define SYS_PRCTL 157
#define SYS_EXIT_GROUP 231

static long system_call(long number, long a, long b, long c) {
    long result;
    __asm__ volatile("syscall"
                     : "=a"(result)
                     : "a"(number), "D"(a), "S"(b), "d"(c)
                     : "rcx", "r11", "memory");
    return result;
}

static long set_death_signal(void) { return system_call(SYS_PRCTL, OPTION_SET_PDEATHSIG, SIGNAL_KILL, 0); }
static long parent_pid(void) { return system_call(SYS_GETPPID, 0, 0, 0); }
static void execute(char *file, char **argv, char **envp) {
    system_call(SYS_EXECVE, (long)file, (long)argv, (long)envp);
}
static void write_error(const char *text, long length) { system_call(SYS_WRITE, 2, (long)text, length); }
static void __attribute__((noreturn)) leave(int status) {
    for (;;) system_call(SYS_EXIT_GROUP, status, 0, 0);
}

#else

#include <sys/prctl.h>
#include <unistd.h>

static long set_death_signal(void) { return prctl(PR_SET_PDEATHSIG, SIGNAL_KILL); }
static long parent_pid(void) { return getppid(); }
static void execute(char *file, char **argv, char **envp) { execve(file, argv, envp); }
static void write_error(const char *text, long length) { (void)!write(2, text, length); }
static void __attribute__((noreturn)) leave(int status) { _exit(status); }

#endif

static long parse_pid(const char *text) {
    long value = 0;
    if (*text == '\0') return -1;
    for (; *text; text++) {
        if (*text < '0' || *text > '9') return -1;
        value = value * 10 + (*text - '0');
    }
    return value;
}

static long length_of(const char *text) {
    long length = 0;
    while (text[length]) length++;
    return length;
}

static void __attribute__((noreturn)) launch(long argc, char **argv, char **envp) {
    if (argc < 4) {
        static const char usage[] = "usage: task-launcher <worker pid> <file> <argv[0]> [arguments...]\n";
        write_error(usage, sizeof usage - 1);
        leave(EXIT_CANNOT_START);
    }
    if (set_death_signal() != 0 || parent_pid() != parse_pid(argv[1])) leave(EXIT_CANNOT_START);
    execute(argv[2], argv + 3, envp);
    static const char failed[] = "task-launcher: cannot execute ";
    write_error(failed, sizeof failed - 1);
    write_error(argv[2], length_of(argv[2]));
    write_error("\n", 1);
    leave(EXIT_CANNOT_START);
}

#ifdef IRIS_FREESTANDING

__attribute__((used, noreturn)) static void start(long *stack) {
    long argc = stack[0];
    char **argv = (char **)(stack + 1);
    launch(argc, argv, argv + argc + 1);
}

/* The kernel leaves argc, argv and the environment on the stack; a call wants it 16-byte aligned. */
__asm__(".globl _start\n"
        "_start:\n"
        "    mov %rsp, %rdi\n"
        "    and $-16, %rsp\n"
        "    call start\n");

#else

extern char **environ;

int main(int argc, char **argv) { launch(argc, argv, environ); }

#endif
