#!/bin/sh
# MinIO's init job (compose service minio-init, image minio/mc): the bucket, one
# policy per service (infra/minio/policies, written by `photon stack s3-policies`)
# and one user per service with its policy attached. Idempotent: a second run
# changes nothing but the users' secrets, which it sets again from .env.
set -eu

mc alias set photon http://minio:9000 "$MINIO_ROOT_USER" "$MINIO_ROOT_PASSWORD" >/dev/null
mc mb --ignore-existing photon/photon

for service in joiner-a joiner-b query-reader-a query-reader-b verifier operations; do
  mc admin policy create photon "photon-$service" "/init/policies/$service.json"
done

user() {  # access key, secret key, service
  mc admin user add photon "$1" "$2"
  # attach fails when the policy is attached already: that is the state we want
  mc admin policy attach photon "photon-$3" --user "$1" 2>/dev/null || true
}
user "$S3_JOINER_A_ACCESS_KEY" "$S3_JOINER_A_SECRET_KEY" joiner-a
user "$S3_JOINER_B_ACCESS_KEY" "$S3_JOINER_B_SECRET_KEY" joiner-b
user "$S3_QUERY_READER_A_ACCESS_KEY" "$S3_QUERY_READER_A_SECRET_KEY" query-reader-a
user "$S3_QUERY_READER_B_ACCESS_KEY" "$S3_QUERY_READER_B_SECRET_KEY" query-reader-b
user "$S3_VERIFIER_ACCESS_KEY" "$S3_VERIFIER_SECRET_KEY" verifier
user "$S3_OPERATIONS_ACCESS_KEY" "$S3_OPERATIONS_SECRET_KEY" operations
echo "minio-init: bucket photon, 6 users with their policies"
