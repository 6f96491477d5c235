#!/bin/sh
# A private CA, a server certificate and a client certificate for trying
# kafkatwist's SSL listener, with openssl only.
#
#   deploy/make-certs.sh [DIR]        (make certs: DIR=certs)
#
# The server certificate names localhost and 127.0.0.1 (subjectAltName), so
# clients that check host names accept it whether they bootstrap from
# localhost or reconnect to the advertised 127.0.0.1 (the default).  For
# other hosts set SERVER_NAMES, e.g.
#   SERVER_NAMES="DNS:kafka.example.com,DNS:localhost,IP:127.0.0.1" deploy/make-certs.sh
#
# Environment:
#   SERVER_NAMES  subjectAltName entries   (DNS:localhost,IP:127.0.0.1)
#   CLIENT_SUBJ   client certificate subject (/CN=app/O=acme: principal User:O=acme,CN=app)
#   DAYS          validity in days          (365)
#
# Writes into DIR: ca.pem (trust this), ca.key, server.pem, server.key,
# server-keystore.pem (chain then key: ssl.keystore.location), client.pem,
# client.key.  Keys are unencrypted: for trying things out, not production.
set -eu

DIR=${1:-certs}
SERVER_NAMES=${SERVER_NAMES:-DNS:localhost,IP:127.0.0.1}
CLIENT_SUBJ=${CLIENT_SUBJ:-/CN=app/O=acme}
DAYS=${DAYS:-365}

command -v openssl >/dev/null || { echo "make-certs: openssl not found" >&2; exit 1; }
mkdir -p "$DIR"
cd "$DIR"
umask 077

key() {
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null
}

# The CA: signs the server and client certificates; clients and the broker trust it.
key ca.key
openssl req -x509 -new -key ca.key -sha256 -days "$DAYS" -subj "/CN=kafkatwist example CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out ca.pem

# The server: its names go in subjectAltName (clients ignore the CN when it is there).
key server.key
openssl req -new -key server.key -subj "/CN=localhost" -out server.csr
printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=%s\n' \
    "$SERVER_NAMES" > server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days "$DAYS" -sha256 \
    -extfile server.ext -out server.pem 2>/dev/null
cat server.pem ca.pem server.key > server-keystore.pem

# A client: its subject becomes the principal, in RFC 2253 order (last RDN first).
key client.key
openssl req -new -key client.key -subj "$CLIENT_SUBJ" -out client.csr
printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n' \
    > client.ext
openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days "$DAYS" -sha256 \
    -extfile client.ext -out client.pem 2>/dev/null

rm -f server.csr server.ext client.csr client.ext ca.srl
chmod 644 ca.pem server.pem client.pem
here=$(pwd)
cat <<EOF
Certificates in $here:
  ca.pem               the CA clients and the broker trust
  server-keystore.pem  ssl.keystore.location (server certificate for $SERVER_NAMES, chain, key)
  client.pem client.key  a client certificate, principal User:$(openssl x509 -in client.pem -noout -subject -nameopt RFC2253 | sed 's/^subject=//')

Broker:
  .venv/bin/kafkatwist --override listeners=PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093 \\
      --override ssl.keystore.location=$here/server-keystore.pem \\
      --override ssl.truststore.location=$here/ca.pem --override ssl.client.auth=required
EOF
