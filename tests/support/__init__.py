"""What every test folder shares: personas, the PostgreSQL race harness, the real Celery worker
launcher, a fake clock, the database scan, run builders. One copy each; the folders' own kits
hold only what is particular to them."""
