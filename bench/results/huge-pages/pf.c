#include <sys/mman.h>
#include <stdio.h>
#include <time.h>
#include <string.h>
#include <stdlib.h>
int main(){ size_t n=400<<20; 
 for(int r=0;r<3;r++){ char*p=mmap(0,n,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
 if(getenv("HUGE")) madvise(p,n,MADV_HUGEPAGE); struct timespec a,b; clock_gettime(CLOCK_THREAD_CPUTIME_ID,&a);
 for(size_t i=0;i<n;i+=4096)p[i]=1;
 clock_gettime(CLOCK_THREAD_CPUTIME_ID,&b);
 double t=(b.tv_sec-a.tv_sec)+(b.tv_nsec-a.tv_nsec)/1e9; printf("%.2f us per fault\n", t/(n/4096)*1e6);
 clock_gettime(CLOCK_THREAD_CPUTIME_ID,&a); memset(p,2,n); clock_gettime(CLOCK_THREAD_CPUTIME_ID,&b);
 t=(b.tv_sec-a.tv_sec)+(b.tv_nsec-a.tv_nsec)/1e9; printf("%.2f us per 4K memset warm\n", t/(n/4096)*1e6);
 munmap(p,n);}
}
