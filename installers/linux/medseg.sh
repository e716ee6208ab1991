#!/bin/sh
# /usr/bin/medseg: the bundle in /opt/medseg (the app, and every command: medseg --help).
exec /opt/medseg/medseg "$@"
