#!/bin/sh
# Adds to an image what the platform's init needs (docs/images.md, "The image contract"):
# openssh-server, tini, a python3 of 3.8 or later, and the init package, which the Dockerfile
# has copied to /opt/starverse/init. Debian and Ubuntu bases.
set -eu
export DEBIAN_FRONTEND=noninteractive
packages="openssh-server tini ca-certificates"
command -v python3 >/dev/null 2>&1 || packages="$packages python3"
apt-get update
# shellcheck disable=SC2086
apt-get install -y --no-install-recommends $packages
rm -rf /var/lib/apt/lists/*
python3 -I -c 'import sys; assert sys.version_info >= (3, 8), sys.version'

# The package made host keys: baked into the image they would be every instance's. Each
# instance gets its own from the platform (the access Secret), kept on its disk.
rm -f /etc/ssh/ssh_host_*

# Root logs in with a key, never a password; sshd refuses an account locked with "!".
usermod -p '*' root
install -d -m 0700 /root/.ssh
install -d -m 0755 /run/sshd /root/.starverse/on-stop.d /opt/starverse/bin
ln -sf /opt/starverse/init/bin/starverse-init /opt/starverse/bin/starverse-init
chmod 0755 /opt/starverse/init/bin/starverse-init
# the platform execs `/opt/starverse/bin/starverse-preflight --json` into a cluster's rank 0, by
# that path (no PATH lookup); the /usr/local/bin link is for people who run it by hand
ln -sf /opt/starverse/init/bin/starverse-preflight /opt/starverse/bin/starverse-preflight
ln -sf /opt/starverse/init/bin/starverse-preflight /usr/local/bin/starverse-preflight
chmod 0755 /opt/starverse/init/bin/starverse-preflight
# an engine image's entry point (an endpoint's pods run it instead of the init)
ln -sf /opt/starverse/init/bin/starverse-serve /opt/starverse/bin/starverse-serve
chmod 0755 /opt/starverse/init/bin/starverse-serve
# the system disk's seeding (an init container runs it in the instance's own image)
ln -sf /opt/starverse/init/bin/starverse-seed-rootfs /opt/starverse/bin/starverse-seed-rootfs
chmod 0755 /opt/starverse/init/bin/starverse-seed-rootfs
# a saved image's layer (the save's build pod runs it in the instance's own image)
ln -sf /opt/starverse/init/bin/starverse-save-layer /opt/starverse/bin/starverse-save-layer
chmod 0755 /opt/starverse/init/bin/starverse-save-layer
test -x /usr/bin/tini
test -x /usr/sbin/sshd
python3 -I -c 'import sys; sys.path.insert(0, "/opt/starverse/init"); import starverse_init.main, starverse_init.serve, starverse_init.savelayer'
