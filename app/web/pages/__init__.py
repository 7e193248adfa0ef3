"""The job pages: /jobs/<id> for people signed in with GitHub who may read its repository."""
