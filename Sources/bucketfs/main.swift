print("bucketfs")
