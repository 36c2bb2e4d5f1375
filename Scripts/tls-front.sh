#!/usr/bin/env bash
# A TLS front for a test server: nginx (Debian nginx-light, installed on first use) with a private
# CA and certificates it generates, proxying to a plain-HTTP server (gcp-storage-emulator,
# fake-gcs-server, Tests/e2e/firebase_server.py, or a fault proxy in front of one). It serves, on
# consecutive ports from TLS_FRONT_PORT:
#
#   PORT     HTTP/2 and HTTP/1.1 (ALPN chooses), certificate for 127.0.0.1 and localhost
#   PORT+1   HTTP/1.1 only, same certificate
#   PORT+2   a certificate signed by the same CA for another name (wrong.example)
#   PORT+3   an expired certificate for 127.0.0.1 and localhost, signed by the same CA
#
#   Scripts/tls-front.sh start HOST:PORT   # prints the exports to use
#   Scripts/tls-front.sh certs             # only the CA and certificates (openssl), in TLS_FRONT_DIR
#   Scripts/tls-front.sh status
#   Scripts/tls-front.sh stop
#
# Environment: TLS_FRONT_PORT (default 9443), TLS_FRONT_DIR (default /tmp/bucketfs-tls-front-PORT:
# the CA, the certificates, nginx's configuration, pid and logs; the access log shows each
# request's protocol). Exit status 3 when nginx cannot be installed (no apt-get, no root).
# Bodies are streamed both ways (no request or response buffering), any size, with long timeouts,
# and Range / Content-Range and Location pass through (Location rewritten to https).
set -euo pipefail
cd "$(dirname "$0")/.."

PORT="${TLS_FRONT_PORT:-9443}"
DIR="${TLS_FRONT_DIR:-/tmp/bucketfs-tls-front-$PORT}"
PIDFILE="$DIR/nginx.pid"

ensure_tools() {
  if command -v nginx >/dev/null && command -v openssl >/dev/null; then return 0; fi
  if ! command -v apt-get >/dev/null; then
    echo "tls-front: nginx or openssl missing and no apt-get to install them" >&2; exit 3
  fi
  local asroot=()
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then asroot=(sudo -n); else
      echo "tls-front: nginx or openssl missing; installing them needs root (apt-get install nginx-light openssl)" >&2; exit 3
    fi
  fi
  echo "tls-front: installing nginx-light and openssl" >&2
  # Other installs may hold the dpkg lock for a while: wait for it.
  for _ in $(seq 1 60); do
    if "${asroot[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o DPkg::Lock::Timeout=120 \
        nginx-light openssl >"/tmp/bucketfs-tls-front-apt.log" 2>&1; then break; fi
    if grep -q "Unable to locate package" /tmp/bucketfs-tls-front-apt.log; then
      "${asroot[@]}" apt-get update -q >/dev/null 2>&1 || true
    fi
    sleep 2
  done
  if ! command -v nginx >/dev/null; then
    echo "tls-front: apt-get install nginx-light failed; see /tmp/bucketfs-tls-front-apt.log" >&2; exit 3
  fi
}

# The CA, a server certificate for 127.0.0.1/localhost, one for another name and an expired one.
make_certificates() {
  mkdir -p "$DIR"
  [ -f "$DIR/expired.pem" ] && return 0
  local d="$DIR"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=bucketfs test CA" \
    -keyout "$d/ca.key" -out "$d/ca.pem" >/dev/null 2>&1
  sign() {  # name, subjectAltName, then `openssl ca`'s date options
    local name="$1" san="$2"; shift 2
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$name" -keyout "$d/$name.key" -out "$d/$name.csr" >/dev/null 2>&1
    mkdir -p "$d/ca.db"; : >"$d/ca.db/index.txt"; [ -f "$d/ca.db/serial" ] || echo 1000 >"$d/ca.db/serial"
    cat >"$d/ca.cnf" <<EOF
[ca]
default_ca = test
[test]
dir = $d/ca.db
database = \$dir/index.txt
serial = \$dir/serial
new_certs_dir = \$dir
default_md = sha256
policy = anything
unique_subject = no
copy_extensions = none
[anything]
commonName = supplied
[ext]
basicConstraints = CA:FALSE
keyUsage = digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = $san
EOF
    openssl ca -batch -config "$d/ca.cnf" -cert "$d/ca.pem" -keyfile "$d/ca.key" -extensions ext \
      -in "$d/$name.csr" -out "$d/$name.pem" -notext "$@" >/dev/null 2>&1
  }
  sign server "IP:127.0.0.1,DNS:localhost" -days 3650
  sign wrongname "DNS:wrong.example" -days 3650
  sign expired "IP:127.0.0.1,DNS:localhost" -startdate 20200101000000Z -enddate 20200201000000Z
}

write_config() {
  local backend="$1"
  mkdir -p "$DIR/tmp"; chmod 1777 "$DIR/tmp"
  local common="
    client_max_body_size 0;
    proxy_request_buffering off;
    proxy_buffering off;
    proxy_http_version 1.1;
    proxy_set_header Connection \"\";
    proxy_set_header Host \$http_host;
    proxy_set_header X-Forwarded-Proto https;
    proxy_redirect http://\$http_host/ https://\$http_host/;
    proxy_redirect http://$backend/ https://\$http_host/;
    proxy_connect_timeout 10s;
    proxy_read_timeout 3600s;
    proxy_send_timeout 3600s;
    send_timeout 3600s;
    client_body_timeout 3600s;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
    location / { proxy_pass http://backend; }"
  cat >"$DIR/nginx.conf" <<EOF
worker_processes 2;
pid $PIDFILE;
error_log $DIR/error.log warn;
events { worker_connections 4096; }
http {
  log_format proto '\$remote_addr \$server_port "\$request" \$status \$body_bytes_sent \$server_protocol \$pid:\$connection \$request_time';
  access_log $DIR/access.log proto;
  client_body_temp_path $DIR/tmp/body;
  proxy_temp_path $DIR/tmp/proxy;
  fastcgi_temp_path $DIR/tmp/fastcgi;
  uwsgi_temp_path $DIR/tmp/uwsgi;
  scgi_temp_path $DIR/tmp/scgi;
  ssl_protocols TLSv1.2 TLSv1.3;
  http2_max_concurrent_streams 256;
  upstream backend { server $backend; keepalive 64; }
  server {
    listen 127.0.0.1:$PORT ssl http2;
    ssl_certificate $DIR/server.pem;
    ssl_certificate_key $DIR/server.key;
    $common
  }
  server {
    listen 127.0.0.1:$((PORT + 1)) ssl;
    ssl_certificate $DIR/server.pem;
    ssl_certificate_key $DIR/server.key;
    $common
  }
  server {
    listen 127.0.0.1:$((PORT + 2)) ssl;
    ssl_certificate $DIR/wrongname.pem;
    ssl_certificate_key $DIR/wrongname.key;
    $common
  }
  server {
    listen 127.0.0.1:$((PORT + 3)) ssl;
    ssl_certificate $DIR/expired.pem;
    ssl_certificate_key $DIR/expired.key;
    $common
  }
}
EOF
}

running() {
  [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null
}

print_env() {
  echo "export BUCKETFS_TLS_CA=$DIR/ca.pem"
  echo "export BUCKETFS_TLS_H2=https://127.0.0.1:$PORT"
  echo "export BUCKETFS_TLS_H1=https://127.0.0.1:$((PORT + 1))"
  echo "export BUCKETFS_TLS_WRONG_NAME=https://127.0.0.1:$((PORT + 2))"
  echo "export BUCKETFS_TLS_EXPIRED=https://127.0.0.1:$((PORT + 3))"
  echo "export BUCKETFS_TLS_ACCESS_LOG=$DIR/access.log"
  echo "# then: bucketfs mount gs://BUCKET MOUNTPOINT --endpoint \$BUCKETFS_TLS_H2 --ca-file \$BUCKETFS_TLS_CA --anonymous"
}

stop() {
  if running; then
    local pid; pid="$(cat "$PIDFILE")"
    kill "$pid"
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    echo "tls-front: stopped (pid $pid)" >&2
  fi
  rm -f "$PIDFILE"
}

case "${1:-}" in
  start)
    backend="${2:?usage: $0 start HOST:PORT (the plain-HTTP server to front)}"
    ensure_tools
    make_certificates
    stop
    write_config "$backend"
    : >"$DIR/access.log"
    if ! nginx -c "$DIR/nginx.conf" -e "$DIR/error.log" 2>"$DIR/start.log"; then
      echo "tls-front: nginx did not start:" >&2; cat "$DIR/start.log" >&2; tail -5 "$DIR/error.log" >&2 || true; exit 1
    fi
    for _ in $(seq 1 50); do running && break; sleep 0.1; done
    echo "tls-front: nginx on 127.0.0.1:$PORT (HTTP/2) and :$((PORT + 1)) (HTTP/1.1) in front of $backend (pid $(cat "$PIDFILE"), $DIR)" >&2
    print_env
    ;;
  certs)
    command -v openssl >/dev/null || { echo "tls-front: openssl is missing (apt-get install openssl)" >&2; exit 3; }
    make_certificates
    echo "$DIR"
    ;;
  stop)
    stop
    ;;
  status)
    if running; then print_env; else echo "tls-front: not running" >&2; exit 1; fi
    ;;
  *)
    echo "usage: $0 start HOST:PORT | stop | status" >&2
    exit 2
    ;;
esac
