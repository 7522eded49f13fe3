/* An LD_PRELOAD library that keeps TensorFlow's gRPC server on the host a worker was given.

TensorFlow's GrpcServer::Init binds "0.0.0.0:" + port (tensorflow/core/distributed_runtime/rpc/
grpc_server_lib.cc), whatever host the task's address names; gRPC then opens an AF_INET6 socket with
IPV6_V6ONLY 0 and binds [::]:port (every interface, IPv4 and IPv6), or 0.0.0.0:port without IPv6.
With SHOGI_DNN_BIND_PORT=P and SHOGI_DNN_BIND_ADDR=A (a numeric address of this machine) in the
environment when the process starts, this bind(2) turns a bind of the wildcard to port P into a bind of A:
  - AF_INET  0.0.0.0:P -> A:P (A an IPv4 address);
  - AF_INET6 [::]:P    -> [A]:P (A an IPv6 address), or [::ffff:A]:P (A an IPv4 address: the socket
    then accepts IPv4 connections to A only).
A wildcard bind to P that cannot be mapped (an IPv6 A on an AF_INET socket) fails with EADDRNOTAVAIL
rather than expose the port. Every other bind (another port, another address, another family, the
variables absent) goes to the real bind unchanged. Built by setup.py (optional: without a C compiler
training runs without it and says that the port listens on every interface); loaded by
shogi_dnn/training/bind_shim.py, which re-executes a cluster worker with LD_PRELOAD set.

It also keeps SIGTERM's action while TensorFlow forms the cluster: TensorFlow's preemption notifier
installs a SIGTERM handler there (tsl/.../preemption_notifier.cc, std::signal) that takes the signal and
does nothing the worker would see, so a SIGTERM in those seconds was lost for the whole run. Between
shogi_dnn_keep_sigterm(1) and shogi_dnn_keep_sigterm(0) (cluster.py, through ctypes), signal(2) and
sigaction(2) calls that would change SIGTERM's action change nothing (they succeed and report the action
in force): SIGTERM keeps the default action set before, and ends the worker at once. Every other call, and
every call outside that window, goes to the real function. */

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_function)(int, const struct sockaddr *, socklen_t);

static bind_function real_bind(void) {
    static bind_function real;     /* a race between threads stores the same pointer twice: harmless */
    if (real == NULL)
        real = (bind_function)dlsym(RTLD_NEXT, "bind");
    return real;
}

/* The variables, read once when the library is loaded (before main: no other thread can change the
   environment then). wanted_port is 0 when SHOGI_DNN_BIND_PORT is absent or invalid. */
static in_port_t wanted_port;                 /* network order */
static char wanted_address[64];               /* INET6_ADDRSTRLEN is 46 */

__attribute__((constructor)) static void read_variables(void) {
    const char *port_text = getenv("SHOGI_DNN_BIND_PORT"), *address = getenv("SHOGI_DNN_BIND_ADDR");
    char *end;
    long port;
    if (port_text == NULL || *port_text == '\0' || address == NULL || *address == '\0'
            || strlen(address) >= sizeof wanted_address)
        return;
    port = strtol(port_text, &end, 10);
    if (*end != '\0' || port <= 0 || port > 65535)
        return;
    strcpy(wanted_address, address);
    wanted_port = htons((in_port_t)port);
}

static int refuse(void) {
    errno = EADDRNOTAVAIL;
    return -1;
}

static int bind_inet(int fd, const struct sockaddr_in *given, const char *address) {
    struct sockaddr_in chosen = *given;
    if (inet_pton(AF_INET, address, &chosen.sin_addr) != 1)
        return refuse();
    return real_bind()(fd, (const struct sockaddr *)&chosen, sizeof chosen);
}

static int bind_inet6(int fd, const struct sockaddr_in6 *given, const char *address) {
    struct sockaddr_in6 chosen = *given;
    struct in_addr v4;
    if (inet_pton(AF_INET6, address, &chosen.sin6_addr) != 1) {
        if (inet_pton(AF_INET, address, &v4) != 1)
            return refuse();
        memset(&chosen.sin6_addr, 0, sizeof chosen.sin6_addr);       /* ::ffff:a.b.c.d */
        chosen.sin6_addr.s6_addr[10] = 0xff;
        chosen.sin6_addr.s6_addr[11] = 0xff;
        memcpy(&chosen.sin6_addr.s6_addr[12], &v4, sizeof v4);
    }
    return real_bind()(fd, (const struct sockaddr *)&chosen, sizeof chosen);
}

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    in_port_t port = wanted_port;
    const char *address = wanted_address;
    if (real_bind() == NULL)
        return refuse();
    if (port == 0 || addr == NULL)
        return real_bind()(fd, addr, len);
    if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
        if (in->sin_port == port && in->sin_addr.s_addr == htonl(INADDR_ANY))
            return bind_inet(fd, in, address);
    } else if (addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)addr;
        if (in6->sin6_port == port && IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr))
            return bind_inet6(fd, in6, address);
    }
    return real_bind()(fd, addr, len);
}

/* --- SIGTERM kept while the cluster forms --- */

static volatile sig_atomic_t keep_sigterm;

int shogi_dnn_keep_sigterm(int on) {
    int before = keep_sigterm;
    keep_sigterm = on != 0;
    return before;
}

typedef int (*sigaction_function)(int, const struct sigaction *, struct sigaction *);
typedef sighandler_t (*signal_function)(int, sighandler_t);

static sigaction_function real_sigaction(void) {
    static sigaction_function real;
    if (real == NULL)
        real = (sigaction_function)dlsym(RTLD_NEXT, "sigaction");
    return real;
}

int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    if (real_sigaction() == NULL) {
        errno = ENOSYS;
        return -1;
    }
    if (keep_sigterm && sig == SIGTERM && act != NULL)
        return real_sigaction()(sig, NULL, old);                /* report, change nothing */
    return real_sigaction()(sig, act, old);
}

sighandler_t signal(int sig, sighandler_t handler) {
    static signal_function real;
    struct sigaction current;
    if (keep_sigterm && sig == SIGTERM) {
        if (real_sigaction() == NULL || real_sigaction()(sig, NULL, &current) != 0)
            return SIG_ERR;
        return current.sa_handler;
    }
    if (real == NULL)
        real = (signal_function)dlsym(RTLD_NEXT, "signal");
    if (real == NULL) {
        errno = ENOSYS;
        return SIG_ERR;
    }
    return real(sig, handler);
}
