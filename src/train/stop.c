/* stop: recording the signals that end a run cleanly (see stop.h). */
#include "train/stop.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

static const int stop_signals[3] = {SIGTERM, SIGINT, SIGUSR1};
static struct sigaction stop_old[3];
static volatile sig_atomic_t stop_sig;
static int stop_installed;

static void on_signal(int sig) {
    if (stop_sig) { /* a second signal: no more waiting for the step to finish */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    stop_sig = sig;
}

void train_stop_install(void) {
    if (stop_installed)
        return;
    stop_sig = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* reads and MPI calls in progress go on */
    for (int i = 0; i < 3; i++)
        sigaction(stop_signals[i], &sa, &stop_old[i]);
    stop_installed = 1;
}

void train_stop_uninstall(void) {
    if (!stop_installed)
        return;
    for (int i = 0; i < 3; i++)
        sigaction(stop_signals[i], &stop_old[i], NULL);
    stop_installed = 0;
}

int train_stop_poll(const dist_world *w) {
    return dist_max_int(w, (int)stop_sig);
}

const char *train_stop_name(int sig) {
    static char buf[32];
    switch (sig) {
    case SIGTERM:
        return "SIGTERM";
    case SIGINT:
        return "SIGINT";
    case SIGUSR1:
        return "SIGUSR1";
    }
    snprintf(buf, sizeof buf, "signal %d", sig);
    return buf;
}
