#!/bin/sh
# Run once by the postgres image when it initialises a new data volume (docker-entrypoint-initdb.d):
# replication connections from the compose network, checked by password like every other connection,
# so the `replica` profile's standby can stream (docs/replicas.md). The superuser the image creates
# (POSTGRES_USER) has the REPLICATION attribute. An existing volume: append the same line and reload.
set -e
echo "host replication all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
