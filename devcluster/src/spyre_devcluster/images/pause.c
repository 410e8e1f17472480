/* The pod sandbox's first process (the "pause" container): it only holds the pod's
 * namespaces open, reaps orphaned children and exits on SIGINT or SIGTERM.
 * Built with `gcc -static` by spyre_devcluster.images.recipes. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) {
  (void)sig;
  _exit(0);
}

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, 0, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction action = {0};
  action.sa_handler = stop;
  sigaction(SIGINT, &action, 0);
  sigaction(SIGTERM, &action, 0);
  action.sa_handler = reap;
  action.sa_flags = SA_NOCLDSTOP | SA_RESTART;
  sigaction(SIGCHLD, &action, 0);
  for (;;)
    pause();
}
