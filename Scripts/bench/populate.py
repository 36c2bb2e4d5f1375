"""Fills the emulator bucket for Scripts/bench.sh with the official client:
   populate.py ENDPOINT BUCKET PREFIX N BIGFILE
   -> N small objects PREFIX/ls/fNNNNN.txt (custom metadata k=v) and PREFIX/read/big.bin from BIGFILE."""
import sys
from concurrent.futures import ThreadPoolExecutor

from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

endpoint, bucket_name, prefix, n, big = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
client = storage.Client(project="bench", client_options={"api_endpoint": endpoint}, credentials=AnonymousCredentials())
bucket = client.bucket(bucket_name)


def small(i):
    b = bucket.blob(f"{prefix}/ls/f{i:05d}.txt")
    b.metadata = {"k": "v"}
    b.upload_from_string(b"x" * (i % 97), content_type="text/plain")


with ThreadPoolExecutor(4) as pool:  # the emulator serves one request at a time; this only hides client latency
    list(pool.map(small, range(n)))
blob = bucket.blob(f"{prefix}/read/big.bin")
blob.chunk_size = 32 * 1024 * 1024
blob.upload_from_filename(big, content_type="application/octet-stream")
