"""Host-side tools: push the image to ECR (push.py) and launch SageMaker training jobs (launch.py).

Run from the repository root: `make push`, `make launch ARGS=...`, or in the dev venv
`.venv/bin/python -m hostkit.aws.push --help`. Region, account and credentials come from the
usual AWS configuration (AWS_PROFILE, AWS_REGION, ~/.aws, instance roles); AWS_ENDPOINT_URL
points every call elsewhere (the tests use moto).
"""
